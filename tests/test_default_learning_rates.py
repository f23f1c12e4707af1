"""Default learning rates follow what the encoders start from: the random tiny models of the synthetic memes train at
2e-3 (Visual BERT at 5e-4: 0.836 → 0.975 val mean AUROC on the zoo budget; the default concat at 1e-3: seed 1234
left a 0.76 plateau on some CPUs), pretrained weights at the family's rate from the Hateful Memes baselines (a real MiniLM at 2e-3 predicted one
constant for every held-out meme). Composed through Hydra, as train.py composes them."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (registers lr_for_weights)
from crossmod.runtime.resolvers import lr_for_weights
from tests.conftest import ROOT

TINY = {"visual_bert": 5e-4, "concat": 1e-3}  # families whose random tiny models learn better below 2e-3
PRETRAINED = {
    "text": (["model.text.name_or_path=sentence-transformers/all-MiniLM-L6-v2"], 5e-5),
    "image": (["model.image.pretrained=true"], 1e-5),
    "concat": (["model.text.name_or_path=bert-base-uncased", "model.image.pretrained=true"], 1e-5),
    "late_fusion": (["model.text.name_or_path=bert-base-uncased"], 5e-5),
    "early_fusion": (["model.image.pretrained=true"], 1e-5),
    "visual_bert": (["model.fusion.name_or_path=uclanlp/visualbert-vqa-coco-pre"], 5e-5),
    "clip_fusion": (["model.fusion.name_or_path=openai/clip-vit-base-patch32"], 1e-4),
}


def _lr(tmp_path, *overrides: str) -> float:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, f"paths.data_dir={tmp_path}"])
    return OmegaConf.select(cfg, "model.optimizer.lr")


@pytest.mark.parametrize("family", sorted(PRETRAINED))
def test_each_family_trains_tiny_models_fast_and_pretrained_ones_gently(family, data_dir):
    overrides, pretrained = PRETRAINED[family]
    assert _lr(data_dir, f"model={family}") == TINY.get(family, 2e-3)  # the session's tiny models (built once)
    assert _lr(data_dir, f"model={family}", *overrides) == pretrained


def test_an_experiments_own_rate_wins(tmp_path):
    assert _lr(tmp_path, "experiment=hm_concat_bert", "data.raw_dir=/data") == 1e-5


def test_random_start_means_every_encoder_random():
    assert lr_for_weights(2e-3, 5e-5, "/assets/tiny-bert-synthetic", False) == 2e-3
    assert lr_for_weights(2e-3, 5e-5, "/assets/tiny-bert-synthetic", True) == 5e-5  # one pretrained encoder: gently
    assert lr_for_weights(2e-3, 5e-5, "bert-base-uncased") == 5e-5

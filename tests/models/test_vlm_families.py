"""Every VLM family through `model=vlm`, each from a tiny random checkpoint folder loaded with `from_pretrained`:
heads and verbalizer train and score, the verbalizer reads the logits generation picks from, the zero-shot
protocol answers its 6 prompts in batches, LoRA presets adapt the modules they name, an exported adapter
loads back with PEFT to the same logits, padding side and image-less memes change nothing they should not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForImageTextToText

from crossmod.artifacts import adapter_folder
from crossmod.data.synthetic import SyntheticMemeSource
from crossmod.inference.scoring import single_device_trainer
from crossmod.models.module import MemeClassifier
from crossmod.models.vlm.families import FAMILIES, family_for
from crossmod.prompting.zeroshot import answer_all
from crossmod.runtime.resolvers import tiny_vlm
from tests.models.test_vlm import build as build_vlm

KINDS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava_onevision", "internvl", "idefics3", "smolvlm", "gemma3")

# Where each checkpoint keeps its language-model layers and its vision encoder's blocks (read off the real
# Transformers classes; written out here so the presets are checked against the model, not against themselves).
LANGUAGE_LAYERS = {kind: "model.language_model.layers." for kind in KINDS} | {
    "idefics3": "model.text_model.layers.",
    "smolvlm": "model.text_model.layers.",
}
VISION_BLOCKS = {
    "qwen2_vl": "model.visual.blocks.",
    "qwen2_5_vl": "model.visual.blocks.",
    "qwen3_vl": "model.visual.blocks.",
    "llava_onevision": "model.vision_tower.encoder.layers.",
    "internvl": "model.vision_tower.encoder.layer.",
    "idefics3": "model.vision_model.encoder.layers.",
    "smolvlm": "model.vision_model.encoder.layers.",
    "gemma3": "model.vision_tower.encoder.layers.",
}


@pytest.fixture(scope="module")
def folders(data_dir) -> dict[str, str]:
    """The session's tiny folders (tests/training's zero-shot and ZeRO-3 family tests build the same ones)."""
    return {kind: tiny_vlm(str(data_dir / "assets" / f"tiny-{kind}-synthetic"), kind) for kind in KINDS}


def build(tmp_path: Path, folder: str, *overrides: str) -> MemeClassifier:
    return build_vlm(tmp_path, f"model.name_or_path={folder}", *overrides)


def samples(size: int = 4, seed: int = 5) -> list[dict]:
    return [
        {"id": s.id, "text": s.text, "image": s.image, "labels": s.labels, "lang": s.lang}
        for s, _ in zip(SyntheticMemeSource(num_groups=4, image_size=64, seed=seed), range(size))
    ]


def batch_of(model: MemeClassifier, memes: list[dict]) -> dict:
    return model.preprocessor.collate([model.preprocessor(s) for s in memes])


def lora_modules(model: MemeClassifier) -> set[str]:
    """Adapted module names as the base model calls them."""
    names = {n.split(".lora_A")[0] for n, _ in model.backbone.model.named_parameters() if ".lora_A." in n}
    return {n.removeprefix("base_model.model.") for n in names}


def linear_layers(model: MemeClassifier, prefix: str, leaves: tuple[str, ...] | None = None) -> set[str]:
    """Linear layers of the base model under `prefix` (an adapted layer counts once: its base layer)."""
    names = {
        name.removesuffix(".base_layer")
        for name, module in model.backbone.base_model().named_modules()
        if isinstance(module, torch.nn.Linear) and ".lora_" not in name
    }
    return {n for n in names if n.startswith(prefix) and (leaves is None or n.rsplit(".", 1)[1] in leaves)}


def test_every_kind_maps_to_one_family(folders):
    for kind, folder in folders.items():
        family = family_for(folder)
        assert kind in family.model_types
    assert sum(len(f.model_types) for f in FAMILIES) == len({t for f in FAMILIES for t in f.model_types})


@pytest.mark.parametrize("kind", KINDS)
def test_head_mode_trains_lora_and_heads_only(kind, folders, tmp_path):
    model = build(tmp_path, folders[kind])
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or name.startswith("head_layers.") for name in trainable)
    batch = batch_of(model, samples())
    logits = model(batch)
    assert set(logits) == set(model.heads) and all(torch.isfinite(v).all() for v in logits.values())
    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=5e-3)
    first = model.heads_loss(model(batch), batch["labels"]).item()
    for _ in range(5):
        optimizer.zero_grad()
        model.heads_loss(model(batch), batch["labels"]).backward()
        optimizer.step()
    assert model.heads_loss(model(batch), batch["labels"]).item() < first


@pytest.mark.parametrize("kind", KINDS)
def test_lora_presets_adapt_the_modules_they_name(kind, folders, tmp_path):
    language = LANGUAGE_LAYERS[kind]
    qv = build(tmp_path, folders[kind])
    assert lora_modules(qv) == linear_layers(qv, language, ("q_proj", "v_proj")) != set()

    every = build(tmp_path, folders[kind], "model.fusion.target_modules=all_linear", "model.fusion.vision_lora=true")
    adapted = lora_modules(every)
    assert {n for n in adapted if n.startswith(language)} == linear_layers(every, language)  # every LM linear layer
    assert {n for n in adapted if not n.startswith(language)} == linear_layers(every, VISION_BLOCKS[kind]) != set()


@pytest.mark.parametrize("kind", KINDS)
def test_verbalizer_reads_the_logits_generation_starts_from(kind, folders, tmp_path):
    model = build(tmp_path, folders[kind], "model.fusion.mode=verbalizer", "model.fusion.lora=null", "model.prompt.input=image_caption")
    batch = batch_of(model, samples())  # captions of different lengths: the batch is left-padded
    assert (batch["attention_mask"] == 0).any()
    model.eval()
    with torch.no_grad():
        scores = model(batch)
        inputs = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and k not in ("option_ids", "labels")}
        first = model.backbone.base_model().generate(
            **inputs, max_new_tokens=1, do_sample=False, output_logits=True, return_dict_in_generate=True
        )
    expected = first.logits[0].gather(1, batch["option_ids"])
    torch.testing.assert_close(scores["US"], expected[:, 0] - expected[:, 1], rtol=1e-4, atol=1e-4)
    assert all(torch.equal(scores["US"], scores[h]) for h in scores)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_shot_answers_the_six_prompts_in_batches(kind, folders, tmp_path):
    model = build(tmp_path, folders[kind], "model.fusion.mode=verbalizer", "model.fusion.lora=null")
    model.eval()
    records = samples(size=3)
    trainer = single_device_trainer()
    rows = [row for index in range(6) for row in answer_all(trainer, model, records, index, batch_size=3, max_new_tokens=3)]
    assert len(rows) == 18 and {r["prompt"] for r in rows} == set(range(6))
    assert all(0.0 <= r["p_hate"] <= 1.0 and isinstance(r["generation"], str) and r["prediction"] in (0, 1, None) for r in rows)


@pytest.mark.parametrize("kind", KINDS)
def test_exported_adapter_loads_back_with_peft_to_the_same_logits(kind, folders, tmp_path):
    model = build(tmp_path, folders[kind])
    batch = batch_of(model, samples())
    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=5e-3)
    for _ in range(3):  # move LoRA B away from zero, so the adapter changes the logits
        optimizer.zero_grad()
        model.heads_loss(model(batch), batch["labels"]).backward()
        optimizer.step()
    exported = adapter_folder.save(model, tmp_path / "adapter")
    model.eval()
    with torch.no_grad():
        features = model.backbone.last_hidden(batch)
        logits = model(batch)

    # what a user does with the folder and PEFT alone: base checkpoint + adapter
    base = AutoModelForImageTextToText.from_pretrained(folders[kind])
    peft_model = PeftModel.from_pretrained(base, str(exported)).eval()
    model.backbone.model = peft_model  # same forward (last real token), PEFT-loaded weights
    with torch.no_grad():
        torch.testing.assert_close(model.backbone.last_hidden(batch), features, rtol=0, atol=0)

    fresh = build(tmp_path, folders[kind], "model.fusion.lora=null")
    adapter_folder.load(fresh, exported, {"base_model": "the tiny VLM"})  # crossmod's own loading path (heads too)
    fresh.eval()
    with torch.no_grad():
        for head, values in fresh(batch).items():
            torch.testing.assert_close(values, logits[head], rtol=0, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_left_and_right_padding_give_each_memes_own_features(kind, folders, tmp_path):
    memes = samples()
    features = {}
    for side in ("left", "right"):
        model = build(
            tmp_path, folders[kind], "model.fusion.lora=null", "model.prompt.input=image_caption", f"model.preprocessor.padding_side={side}"
        )
        model.eval()
        batch = batch_of(model, memes)
        assert (batch["attention_mask"] == 0).any()
        with torch.no_grad():
            features[side] = model.backbone.last_hidden(batch)
            alone = torch.cat([model.backbone.last_hidden(batch_of(model, [m])) for m in memes])
        torch.testing.assert_close(features[side], alone, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(features["left"], features["right"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_memes_without_images_run_with_a_placeholder(kind, folders, tmp_path):
    model = build(tmp_path, folders[kind])
    memes = samples(size=3)
    memes[1] = memes[1] | {"image": None}
    model.eval()
    with torch.no_grad():
        mixed = model(batch_of(model, memes))
        none = model(batch_of(model, [m | {"image": None} for m in memes]))
    assert all(torch.isfinite(v).all() for v in (*mixed.values(), *none.values()))


@pytest.mark.parametrize("kind", KINDS)
def test_the_template_writes_the_special_tokens_once(kind, folders, tmp_path):
    """The chat template writes BOS where the model expects it; the processor must not add another."""
    model = build(tmp_path, folders[kind])
    features = model.preprocessor(samples(size=1)[0])
    tokenizer = model.preprocessor.processor.tokenizer
    ids = model.preprocessor.collate([features])["input_ids"][0].tolist()
    if tokenizer.bos_token is not None:
        assert ids.count(tokenizer.bos_token_id) == features["chats"][0].count(tokenizer.bos_token)


def test_a_template_that_drops_the_image_is_an_error(folders, tmp_path):
    import shutil

    folder = tmp_path / "no_images"
    shutil.copytree(folders["llava_onevision"], folder)
    template = (folder / "chat_template.jinja").read_text()
    (folder / "chat_template.jinja").write_text(template.replace("{{ '<image>\n' }}", ""))
    model = build(tmp_path, str(folder))
    with pytest.raises(ValueError, match="wrote no image placeholder '<image>'"):
        model.preprocessor(samples(size=1)[0])
    caption_only = build(tmp_path, str(folder), "model.prompt.input=caption")  # no image asked for: fine
    assert caption_only.preprocessor(samples(size=1)[0])["image"] is None


def test_unknown_families_are_named_and_can_be_described(folders, tmp_path):
    import json
    import shutil

    folder = tmp_path / "renamed"
    shutil.copytree(folders["llava_onevision"], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"model_type": "my_vlm"}))
    with pytest.raises(ValueError, match="model_type 'my_vlm' is not a known VLM family"):
        family_for(str(folder))
    assert family_for(str(folder), "llava_onevision").name == "llava_onevision"
    row = {
        "name": "mine",
        "language_model": r"model\.language_model",
        "vision_tower": r"model\.vision_tower",
        "vision_layers": r"model\.vision_tower\.encoder\.layers",
        "vision_linear": ["q_proj", "v_proj"],
        "image_placeholder": "<image>",
    }
    described = family_for(str(folder), row)
    assert described.targets("qv") == r"model\.language_model\..*\.(q_proj|v_proj)" and described.projector is None
    with pytest.raises(ValueError, match="unknown VLM family 'nope'"):
        family_for(str(folder), "nope")


def test_pixel_bounds_are_refused_where_the_processor_has_none(folders, tmp_path):
    with pytest.raises(Exception, match="min_pixels/max_pixels bound the pixel count"):
        build(tmp_path, folders["gemma3"], "model.preprocessor.max_pixels=3136")

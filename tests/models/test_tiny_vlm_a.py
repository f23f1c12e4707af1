"""Tiny LLaVA-OneVision, InternVL and Gemma 3 folders load, chat, batch, run and generate as hub checkpoints do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from crossmod.data.synthetic import caption_corpus
from crossmod.models.tiny.gemma3 import build_tiny_gemma3
from crossmod.models.tiny.internvl import build_tiny_internvl
from crossmod.models.tiny.llava_onevision import build_tiny_llava_onevision
from crossmod.models.vlm.prompts import PromptSpec, prompt_corpus
from tests.conftest import ROOT

BUILDERS = {"llava_onevision": build_tiny_llava_onevision, "internvl": build_tiny_internvl, "gemma3": build_tiny_gemma3}
FAMILIES = tuple(BUILDERS)

# What each family's processor returns besides input_ids / attention_mask / pixel_values.
EXTRA_KEYS = {"llava_onevision": {"image_sizes", "batch_num_images"}, "internvl": set(), "gemma3": {"token_type_ids"}}

QUESTION = "Is this meme hateful? Answer a or b."
# The prompt each real template renders for one user turn [image, text] with a generation prompt.
EXPECTED_CHAT = {
    "llava_onevision": f"<|im_start|>user\n<image>\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n",
    "internvl": f"<|im_start|>user\n<IMG_CONTEXT>\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n",
    "gemma3": f"<bos><start_of_turn>user\n<start_of_image>{QUESTION}<end_of_turn>\n<start_of_turn>model\n",
}
SPECIAL_TOKENS = {
    "llava_onevision": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"],
    "internvl": ["<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>", "<|vision_start|>"],
    "gemma3": ["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"],
}


def corpus() -> list[str]:
    """The synthetic captions and every fixed prompt string, as the tiny Qwen2-VL's tokenizer is trained on."""
    spec = PromptSpec(**OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "vlm.yaml").prompt))
    return caption_corpus() + prompt_corpus(spec) + [QUESTION]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_vlm_a")
    texts = corpus()
    return {family: build(root / family, texts) for family, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def loaded(folders) -> dict[str, tuple]:
    cache: dict[str, tuple] = {}

    def load(family: str) -> tuple:
        if family not in cache:
            processor = AutoProcessor.from_pretrained(folders[family])
            processor.tokenizer.padding_side = "left"
            cache[family] = (processor, AutoModelForImageTextToText.from_pretrained(folders[family]).eval())
        return cache[family]

    return load


def chat(processor, text: str) -> str:
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def noise_image(width: int, height: int, seed: int) -> Image.Image:
    generator = torch.Generator().manual_seed(seed)
    return Image.fromarray((torch.rand(height, width, 3, generator=generator) * 255).byte().numpy())


def gray_placeholder() -> Image.Image:
    """What the VLM preprocessor shows for a meme without an image."""
    return Image.new("RGB", (512, 512), (127, 127, 127))


def batch(processor, images: list[Image.Image], texts: tuple[str, str] = (QUESTION, "a cat and a dog sat on the mat. " + QUESTION)):
    """Two chats of different lengths, one image each, left-padded; images nested one list per chat (Gemma 3 needs it).

    `add_special_tokens=False`: the chat template writes any BOS itself (Gemma 3's would be doubled).
    """
    chats = [chat(processor, text) for text in texts]
    return processor(text=chats, images=[[image] for image in images], padding=True, return_tensors="pt", add_special_tokens=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_folder_is_tiny_and_loads_with_the_familys_classes_and_tokens(family, folders, loaded):
    processor, model = loaded(family)
    assert sum(f.stat().st_size for f in folders[family].iterdir()) < 3_000_000
    assert model.config.model_type == family and type(model).__name__.lower().startswith(family.replace("_", ""))
    assert type(processor).__name__.lower().startswith(family.replace("_", "")) and processor.image_processor is not None
    tokenizer = processor.tokenizer
    for token in SPECIAL_TOKENS[family]:
        assert tokenizer.tokenize(f"x{token}y")[1:-1] == [token], f"{token} is not kept whole"
    # Gemma 3's processor calls its boi token the image token; the soft token the model fills is the tokenizer's.
    image_token_id = tokenizer.image_token_id if family == "gemma3" else processor.image_token_id
    assert image_token_id == model.config.image_token_id
    assert model.get_input_embeddings().num_embeddings >= len(tokenizer)
    spec = PromptSpec(**OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "vlm.yaml").prompt))
    for lang in ("en", *spec.native_sets):
        for letter in spec.prompt_set(lang, native=True).letters:
            assert len(tokenizer.encode(letter, add_special_tokens=False)) == 1, f"{letter!r} ({lang}) is not one token"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_chat_template_renders_the_real_templates_structure(family, loaded):
    processor, _ = loaded(family)
    assert chat(processor, QUESTION) == EXPECTED_CHAT[family]


def test_gemma3_expands_each_image_between_its_boi_and_eoi_tokens_marked_by_token_type_ids(loaded):
    processor, model = loaded("gemma3")
    inputs = batch(processor, [noise_image(60, 40, 0), gray_placeholder()])
    tokens = processor.tokenizer.convert_ids_to_tokens(inputs["input_ids"][1])
    soft = [i for i, token in enumerate(tokens) if token == "<image_soft_token>"]
    assert len(soft) == model.config.mm_tokens_per_image == processor.image_seq_length
    assert tokens[soft[0] - 1] == "<start_of_image>" and tokens[soft[-1] + 1] == "<end_of_image>"
    assert inputs["token_type_ids"][1].nonzero().flatten().tolist() == soft
    assert tokens.count("<bos>") == 1


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("second_image", ["meme", "placeholder"])
def test_a_left_padded_batch_runs_forward_and_generate(family, second_image, loaded):
    processor, model = loaded(family)
    images = [noise_image(60, 40, 0), noise_image(48, 64, 1) if second_image == "meme" else gray_placeholder()]
    inputs = batch(processor, images)
    assert set(inputs) == {"input_ids", "attention_mask", "pixel_values"} | EXTRA_KEYS[family]
    mask = inputs["attention_mask"]
    assert mask[0, 0] == 0 and mask[:, -1].all(), "the shorter chat is padded on the left"
    with torch.no_grad():
        logits = model(**inputs).logits
        generated = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert logits.shape[:2] == inputs["input_ids"].shape and torch.isfinite(logits).all()
    assert generated.shape[0] == 2 and 1 <= generated.shape[1] - inputs["input_ids"].shape[1] <= 3


@pytest.mark.parametrize("family", FAMILIES)
def test_left_padding_leaves_the_last_token_features_of_the_shorter_chat_unchanged(family, loaded):
    processor, model = loaded(family)
    images = [noise_image(60, 40, 0), gray_placeholder()]
    with torch.no_grad():
        padded = model.model(**batch(processor, images)).last_hidden_state[0, -1]
        alone = processor(text=[chat(processor, QUESTION)], images=[[images[0]]], return_tensors="pt", add_special_tokens=False)
        single = model.model(**alone).last_hidden_state[0, -1]
    assert torch.isfinite(padded).all()
    torch.testing.assert_close(padded, single, atol=1e-4, rtol=1e-4)


def test_the_familys_extra_keys_matter_to_the_base_models_forward(loaded):
    """image_sizes (LLaVA-OneVision) cannot be left out; token_type_ids (Gemma 3) change the image tokens' attention."""
    processor, model = loaded("llava_onevision")
    inputs = batch(processor, [noise_image(60, 40, 0), gray_placeholder()])
    with pytest.raises(TypeError):
        model.model(**{k: v for k, v in inputs.items() if k != "image_sizes"})

    processor, model = loaded("gemma3")
    inputs = batch(processor, [noise_image(60, 40, 0), gray_placeholder()])
    with torch.no_grad():
        full = model.model(**inputs).last_hidden_state
        causal_only = model.model(**{k: v for k, v in inputs.items() if k != "token_type_ids"}).last_hidden_state
    assert not torch.allclose(full, causal_only, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_build_is_deterministic(family, folders, tmp_path):
    again = BUILDERS[family](tmp_path / family, corpus())
    for name in ("tokenizer.json", "config.json", "model.safetensors"):
        assert (again / name).read_bytes() == (folders[family] / name).read_bytes(), name
    config = json.loads((again / "config.json").read_text())
    assert config["model_type"] == family

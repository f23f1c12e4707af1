"""Tiny Idefics3, SmolVLM and Qwen3-VL folders load like hub checkpoints and run a batched forward and generate."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from omegaconf import OmegaConf
from packaging.version import Version
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from crossmod.data.synthetic import caption_corpus
from crossmod.models.tiny.idefics3 import build_tiny_idefics3
from crossmod.models.tiny.qwen3_vl import build_tiny_qwen3_vl
from crossmod.models.vlm.prompts import PromptSpec, prompt_corpus
from tests.conftest import ROOT

# SmolVLM's processor refuses a flat image list for a batch of chats; Transformers 5.23 reworded the refusal (before:
# "The number of images in the text [1, 1] and images [2] should be the same.", the floor stack's wording).
SMOLVLM_REFUSAL = "number of <image> tokens" if Version(transformers.__version__) >= Version("5.23") else "number of images in the text"


@dataclass(frozen=True)
class Family:
    model_class: str
    processor_class: str
    image_placeholder: str  # what the chat template writes for one image
    image_token: str  # what the processor repeats per image feature
    prompt_start: str  # the rendered chat begins with this
    generation_prompt: str  # ... and ends with this
    base_model_keys: frozenset[str]  # processor outputs the forward takes besides input_ids/attention_mask/pixel_values
    language_layers: str  # regex prefix of the language model's decoder layers
    vision_linears: str  # regex of the vision tower's and projector's linear layers


FAMILIES = {
    "idefics3": Family(
        model_class="Idefics3ForConditionalGeneration",
        processor_class="Idefics3Processor",
        image_placeholder="<image>",
        image_token="<image>",
        prompt_start="<|begin_of_text|>User:",
        generation_prompt="<end_of_utterance>\nAssistant:",
        base_model_keys=frozenset({"pixel_attention_mask"}),
        language_layers=r"model\.text_model\.layers\.\d+",
        vision_linears=r"model\.(vision_model\.encoder\.layers\.\d+\.(self_attn\.(q|k|v|out)_proj|mlp\.fc[12])|connector\.modality_projection\.proj)",
    ),
    "smolvlm": Family(
        model_class="SmolVLMForConditionalGeneration",
        processor_class="SmolVLMProcessor",
        image_placeholder="<image>",
        image_token="<image>",
        prompt_start="<|im_start|>User:",
        generation_prompt="<end_of_utterance>\nAssistant:",
        base_model_keys=frozenset({"pixel_attention_mask"}),
        language_layers=r"model\.text_model\.layers\.\d+",
        vision_linears=r"model\.(vision_model\.encoder\.layers\.\d+\.(self_attn\.(q|k|v|out)_proj|mlp\.fc[12])|connector\.modality_projection\.proj)",
    ),
    "qwen3_vl": Family(
        model_class="Qwen3VLForConditionalGeneration",
        processor_class="Qwen3VLProcessor",
        image_placeholder="<|vision_start|><|image_pad|><|vision_end|>",
        image_token="<|image_pad|>",
        prompt_start="<|im_start|>user\n",
        generation_prompt="<|im_end|>\n<|im_start|>assistant\n",
        base_model_keys=frozenset({"image_grid_thw", "mm_token_type_ids"}),
        language_layers=r"model\.language_model\.layers\.\d+",
        vision_linears=r"model\.visual\.(blocks\.\d+\.(attn\.(qkv|proj)|mlp\.linear_fc[12])|merger\.linear_fc[12]|deepstack_merger_list\.\d+\.linear_fc[12])",
    ),
}
NAMES = tuple(FAMILIES)


def corpus() -> list[str]:
    """What crossmod's tiny models are trained on: the synthetic captions and the study's prompts."""
    spec = PromptSpec(**OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "vlm.yaml").prompt))
    return caption_corpus() + prompt_corpus(spec)


def build(name: str, out_dir: Path, seed: int = 0) -> Path:
    if name == "qwen3_vl":
        return build_tiny_qwen3_vl(out_dir, corpus(), seed=seed)
    return build_tiny_idefics3(out_dir, corpus(), version=name, seed=seed)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_vlm_b")
    return {name: build(name, root / name) for name in NAMES}


@pytest.fixture(scope="module")
def loaded(folders) -> dict[str, tuple]:
    return {
        name: (AutoProcessor.from_pretrained(folder), AutoModelForImageTextToText.from_pretrained(folder).eval())
        for name, folder in folders.items()
    }


def user_turn(*content: dict) -> list[dict]:
    return [{"role": "user", "content": list(content)}]


@pytest.mark.parametrize("name", NAMES)
def test_the_folder_loads_through_the_auto_classes_of_its_family(name, folders, loaded):
    processor, model = loaded[name]
    assert type(model).__name__ == FAMILIES[name].model_class and type(processor).__name__ == FAMILIES[name].processor_class
    assert model.config.model_type == name
    assert {"config.json", "model.safetensors", "processor_config.json", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in folders[name].iterdir()
    }
    assert model.config.get_text_config().hidden_size == 64 and model.config.get_text_config().num_hidden_layers == 2


@pytest.mark.parametrize("name", NAMES)
def test_the_chat_template_renders_the_family_turns(name, loaded):
    processor, _ = loaded[name]
    family = FAMILIES[name]
    image_first = processor.apply_chat_template(
        user_turn({"type": "image"}, {"type": "text", "text": "Is it hate?"}), add_generation_prompt=True, tokenize=False
    )
    text_first = processor.apply_chat_template(
        user_turn({"type": "text", "text": "Meme:"}, {"type": "image"}, {"type": "text", "text": "a or b"}),
        add_generation_prompt=True,
        tokenize=False,
    )
    if name == "qwen3_vl":  # no default system turn (Qwen2-VL adds one)
        assert image_first == f"<|im_start|>user\n{family.image_placeholder}Is it hate?<|im_end|>\n<|im_start|>assistant\n"
        assert text_first == f"<|im_start|>user\nMeme:{family.image_placeholder}a or b<|im_end|>\n<|im_start|>assistant\n"
    else:  # "User:" before an image, "User: " before text
        start = family.prompt_start
        assert image_first == f"{start}<image>Is it hate?<end_of_utterance>\nAssistant:"
        assert text_first == f"{start} Meme:<image>a or b<end_of_utterance>\nAssistant:"
    without_prompt = processor.apply_chat_template(user_turn({"type": "text", "text": "x"}), tokenize=False)
    assert not without_prompt.endswith(family.generation_prompt)


@pytest.mark.parametrize("name", NAMES)
def test_special_tokens_and_answer_letters_are_single_tokens(name, loaded):
    tokenizer = loaded[name][0].tokenizer
    specials = {
        FAMILIES[name].image_token,
        tokenizer.eos_token,
        tokenizer.pad_token,
        *re.findall(r"<[^<>]+>", FAMILIES[name].image_placeholder),
    }
    if name != "qwen3_vl":
        specials |= {"<fake_token_around_image>", "<global-img>", "<end_of_utterance>", "<row_6_col_6>"}
    for text in sorted(specials) + ["a", "b", " a", " b"]:
        assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == 1, text
    assert tokenizer.convert_tokens_to_ids("a") != tokenizer.convert_tokens_to_ids("b")
    bos_added = tokenizer("a")["input_ids"][0] == tokenizer.bos_token_id
    assert bos_added == (name == "idefics3")  # Llama 3 adds BOS; SmolLM2 and Qwen do not


def chats_and_images(processor, gray: bool) -> tuple[list[str], list[Image.Image]]:
    messages = [
        user_turn({"type": "image"}, {"type": "text", "text": "Is it hate? a or b"}),
        user_turn(
            {"type": "text", "text": "Definition of Hate Speech: the cat and the dog, a longer one. "},
            {"type": "image"},
            {"type": "text", "text": "a or b"},
        ),
    ]
    chats = [processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    if gray:  # crossmod's placeholder for an image-less meme
        return chats, [Image.new("RGB", (512, 512), (127, 127, 127))] * 2
    return chats, [Image.new("RGB", (64, 48), (200, 10, 10)), Image.new("RGB", (40, 70), (10, 200, 10))]


@pytest.mark.parametrize("gray", [False, True], ids=["photo", "gray"])
@pytest.mark.parametrize("name", NAMES)
def test_a_left_padded_batch_runs_forward_and_generate(name, gray, loaded):
    processor, model = loaded[name]
    family = FAMILIES[name]
    processor.tokenizer.padding_side = "left"
    chats, images = chats_and_images(processor, gray)
    # One list per sample works for every family; SmolVLM refuses a flat list for a batch of chats.
    inputs = processor(text=chats, images=[[image] for image in images], padding=True, return_tensors="pt")
    if name == "smolvlm":
        with pytest.raises(ValueError, match=SMOLVLM_REFUSAL):
            processor(text=chats, images=images, padding=True, return_tensors="pt")
    else:
        flat = processor(text=chats, images=images, padding=True, return_tensors="pt")
        assert all(torch.equal(flat[k], inputs[k]) for k in inputs)
    assert set(inputs) == {"input_ids", "attention_mask", "pixel_values"} | family.base_model_keys
    mask = inputs["attention_mask"]
    assert mask[0, 0] == 0 and mask[:, -1].eq(1).all()  # the shorter chat is padded on the left
    assert (inputs["input_ids"][0, : int((mask[0] == 0).sum())] == processor.tokenizer.pad_token_id).all()
    image_id = processor.tokenizer.convert_tokens_to_ids(family.image_token)
    per_row = (inputs["input_ids"] == image_id).sum(dim=1)
    if name == "qwen3_vl":
        grid = inputs["image_grid_thw"]
        assert per_row.tolist() == (grid.prod(dim=1) // 4).tolist()
        assert (inputs["mm_token_type_ids"] == 1).sum(dim=1).tolist() == per_row.tolist()
    else:  # no image splitting: one 32² square per image, one block of image_seq_len tokens
        assert tuple(inputs["pixel_values"].shape) == (2, 1, 3, 32, 32) and per_row.tolist() == [processor.image_seq_len] * 2 == [4, 4]
        assert inputs["pixel_attention_mask"].all()
        assert (inputs["input_ids"] == processor.tokenizer.convert_tokens_to_ids("<fake_token_around_image>")).sum(dim=1).tolist() == [2, 2]
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (*inputs["input_ids"].shape, model.config.get_text_config().vocab_size) and torch.isfinite(logits).all()
    generated = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    length = inputs["input_ids"].shape[1]
    assert length < generated.shape[1] <= length + 3 and torch.equal(generated[:, :length], inputs["input_ids"])


@pytest.mark.parametrize("name", NAMES)
def test_the_base_model_forward_needs_the_family_keys(name, loaded):
    processor, model = loaded[name]
    processor.tokenizer.padding_side = "left"
    chats, images = chats_and_images(processor, gray=False)
    inputs = dict(processor(text=chats, images=[[image] for image in images], padding=True, return_tensors="pt"))
    with torch.no_grad():
        full = model.model(**inputs).last_hidden_state
        if name == "qwen3_vl":  # M-RoPE positions come from the token types and the image grids
            with pytest.raises(ValueError, match="mm_token_type_ids"):
                model.model(**{k: v for k, v in inputs.items() if k != "mm_token_type_ids"})
            with pytest.raises(Exception):  # noqa: B017 - the grid is needed to place the patches; the error type is the library's
                model.model(**{k: v for k, v in inputs.items() if k != "image_grid_thw"})
        else:  # optional: all ones for unpadded square images, which is what the tiny processor makes
            without_mask = model.model(**{k: v for k, v in inputs.items() if k != "pixel_attention_mask"}).last_hidden_state
            torch.testing.assert_close(without_mask, full)
    assert torch.isfinite(full).all()


@pytest.mark.parametrize("name", NAMES)
def test_lora_regexes_can_tell_the_towers_apart(name, loaded):
    model = loaded[name][1]
    family = FAMILIES[name]
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    language = [n for n in linears if re.fullmatch(family.language_layers + r"\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)", n)]
    vision = [n for n in linears if re.fullmatch(family.vision_linears, n)]
    assert sorted(language + vision + ["lm_head"]) == sorted(linears)  # every linear layer is in one group
    assert len(language) == 2 * 7 and vision
    qv = [n for n in linears if re.fullmatch(family.language_layers + r"\.self_attn\.(q|v)_proj", n)]
    assert len(qv) == 2 * 2
    vision_qv = [n for n in vision if re.search(r"\.(q|v)_proj$", n)]
    assert bool(vision_qv) == (name != "qwen3_vl")  # SigLIP's attention is also called q_proj/v_proj


@pytest.mark.parametrize("name", NAMES)
def test_the_build_is_deterministic(name, folders, tmp_path):
    again = build(name, tmp_path / "again")
    other_seed = build(name, tmp_path / "other", seed=1)
    for file in ("model.safetensors", "tokenizer.json", "processor_config.json", "config.json"):
        assert (again / file).read_bytes() == (folders[name] / file).read_bytes(), file
    assert (other_seed / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="version must be one of idefics3, smolvlm, got 'idefics2'"):
        build_tiny_idefics3(tmp_path / "x", ["a"], version="idefics2")
    with pytest.raises(ValueError, match="image_size must be a multiple of 16"):
        build_tiny_idefics3(tmp_path / "y", ["a"], image_size=40)
    with pytest.raises(ValueError, match="image_size must be a multiple of 32"):
        build_tiny_qwen3_vl(tmp_path / "z", ["a"], image_size=48)
    assert not any(tmp_path.iterdir())

"""A tiny random Idefics3 or SmolVLM checkpoint folder, built like a real one.

Config, weights, a byte-level BPE tokenizer trained on the fly with the family's special tokens
(`<fake_token_around_image>`, `<image>`, `<global-img>`, `<end_of_utterance>`, the `<row_i_col_j>` tile
tags), the image processor (and SmolVLM's video processor) and the chat template are written with
`save_pretrained`, so tests and CPU runs load the folder through the same `AutoProcessor` /
`AutoModelForImageTextToText.from_pretrained` path as `HuggingFaceM4/Idefics3-8B-Llama3` or
`HuggingFaceTB/SmolVLM-256M-Instruct`.

Where the family facts come from:
- The chat templates are the ones these checkpoints ship (`chat_template.json`); the same strings
  appear in Transformers' own `tests/models/idefics3|smolvlm/test_processing_*.py` and as
  `DEFAULT_CHAT_TEMPLATE` in `transformers/models/smolvlm/processing_smolvlm.py`. Idefics3 writes
  `<|begin_of_text|>` literally AND its Llama 3 tokenizer adds it again when the rendered chat is
  tokenized, so a real Idefics3 prompt starts with two BOS tokens; the tiny one keeps that quirk.
- Special tokens and roles of bos/eos/pad follow the checkpoints' `tokenizer_config.json`: SmolVLM
  (SmolLM2 vocabulary) has bos `<|im_start|>`, eos `<end_of_utterance>`, pad `<|im_end|>` and adds no
  BOS itself; Idefics3 (Llama 3 vocabulary) has bos `<|begin_of_text|>`, eos `<|end_of_text|>` and pad
  `<|reserved_special_token_0|>` (id 128002, `Idefics3Config`'s default pad id).

Image splitting is off (`do_image_splitting=False`) and `size` = `max_image_size` = `image_size`, so
every image becomes one `image_size`² square: one `<fake_token_around_image><global-img>` block of
`image_seq_len` = (image_size / patch_size)² / scale_factor² `<image>` tokens per image, no tiles.
SmolVLM's processor needs `num2words`, and one list of images per chat when it gets a batch of
chats (Idefics3's also takes a flat list).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import processors
from transformers import PreTrainedTokenizerFast

from crossmod.models.tiny.bpe import byte_level_tokenizer, train_byte_level_bpe
from crossmod.models.tiny.folder import build_once

VERSIONS = ("idefics3", "smolvlm")
PATCH_SIZE = 8
SCALE_FACTOR = 2
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
TILE_TOKENS = [f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)]

# The text tokens each family's vocabulary starts with, and their roles (tokenizer_config.json).
TEXT_TOKENS = {
    "idefics3": {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "pad": "<|reserved_special_token_0|>"},
    "smolvlm": {"unk": "<|endoftext|>", "bos": "<|im_start|>", "pad": "<|im_end|>"},
}

_TURNS = (
    "{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
CHAT_TEMPLATES = {"idefics3": "<|begin_of_text|>" + _TURNS, "smolvlm": "<|im_start|>" + _TURNS}


def special_tokens(version: str) -> list[str]:
    """The family's special tokens in vocabulary order: text roles first, then the vision tags."""
    return list(dict.fromkeys(TEXT_TOKENS[version].values())) + IMAGE_TOKENS + TILE_TOKENS


def _train_tokenizer(corpus: list[str], version: str, vocab_size: int = 800) -> PreTrainedTokenizerFast:
    """Byte-level BPE (like Llama 3's and SmolLM2's) over `corpus`, every byte reachable, the family's specials."""
    _check_version(version)
    specials = special_tokens(version)
    roles = TEXT_TOKENS[version]
    tokenizer = byte_level_tokenizer(*train_byte_level_bpe(corpus, specials, vocab_size), specials)
    if version == "idefics3":  # Llama 3's tokenizer puts BOS before every encoded text
        bos = roles["bos"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.token_to_id(bos))]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        **{f"{role}_token": token for role, token in roles.items()},
        extra_special_tokens={
            "fake_image_token": "<fake_token_around_image>",
            "image_token": "<image>",
            "end_of_utterance_token": "<end_of_utterance>",
            "global_image_token": "<global-img>",
        },
    )
    if version == "smolvlm":
        fast.eos_token = "<end_of_utterance>"
    return fast


def build_tiny_idefics3(
    out_dir: str | Path,
    corpus: list[str],
    version: str = "idefics3",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    image_size: int = 32,
) -> Path:
    """`version`: `idefics3` or `smolvlm`. Every image is resized to `image_size`² (a multiple of 16) and not split."""
    _check_version(version)
    if image_size % (PATCH_SIZE * SCALE_FACTOR):
        raise ValueError(
            f"image_size must be a multiple of {PATCH_SIZE * SCALE_FACTOR} (patch {PATCH_SIZE} × scale factor {SCALE_FACTOR}), got {image_size}"
        )
    image_seq_len = (image_size // PATCH_SIZE) ** 2 // SCALE_FACTOR**2

    def write(staging: Path) -> None:
        from transformers import AutoConfig, AutoModelForImageTextToText

        tokenizer = _train_tokenizer(corpus, version)
        tokenizer.chat_template = CHAT_TEMPLATES[version]
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in special_tokens(version)}
        eos = [ids["<end_of_utterance>"]] + ([ids["<|end_of_text|>"]] if version == "idefics3" else [])
        pad = ids[TEXT_TOKENS[version]["pad"]]
        text = dict(
            model_type="llama",
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 2,
            num_hidden_layers=num_layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            bos_token_id=ids[TEXT_TOKENS[version]["bos"]],
            eos_token_id=eos,
            pad_token_id=pad,
        )
        vision = dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=image_size, patch_size=PATCH_SIZE
        )
        config = AutoConfig.for_model(
            version, text_config=text, vision_config=vision, image_token_id=ids["<image>"], scale_factor=SCALE_FACTOR, pad_token_id=pad
        )
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
        model.generation_config.bos_token_id = ids[TEXT_TOKENS[version]["bos"]]
        model.generation_config.eos_token_id = eos
        model.generation_config.pad_token_id = pad
        _processor(version, tokenizer, image_size, image_seq_len).save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)


def _processor(version: str, tokenizer: PreTrainedTokenizerFast, image_size: int, image_seq_len: int):
    """The family's processor with splitting off: images resized (longest edge) then squared to `image_size`."""
    from transformers import Idefics3ImageProcessor, Idefics3Processor, SmolVLMImageProcessor, SmolVLMProcessor, SmolVLMVideoProcessor

    sizes = dict(size={"longest_edge": image_size}, max_image_size={"longest_edge": image_size})
    template = CHAT_TEMPLATES[version]
    if version == "idefics3":
        image_processor = Idefics3ImageProcessor(do_image_splitting=False, **sizes)
        return Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=image_seq_len, chat_template=template)
    image_processor = SmolVLMImageProcessor(do_image_splitting=False, **sizes)
    video_processor = SmolVLMVideoProcessor(image_mean=[0.5] * 3, image_std=[0.5] * 3, **sizes)
    return SmolVLMProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        image_seq_len=image_seq_len,
        chat_template=template,
    )


def _check_version(version: str) -> None:
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {', '.join(VERSIONS)}, got {version!r}")

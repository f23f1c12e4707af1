"""A tiny random InternVL (Transformers-native, InternVL3-style: Qwen2 text + InternViT) checkpoint folder.

Mirrors what Transformers' `convert_internvl_weights_to_hf.py` writes for `OpenGVLab/InternVL3-*-hf`:
the Qwen2.5-VL tokenizer with InternVL's tokens added (`<img>`, `</img>`, `<IMG_CONTEXT>`, `<quad>`,
`<ref>`, `<box>` pairs, `<video>`) and named `start_image_token` / `end_image_token` /
`context_image_token` / `video_token`, `InternVLProcessor` with the GOT-OCR2 image processor (tiles
plus a thumbnail) and InternVL's video processor, the pixel-shuffle projector (`downsample_ratio` 0.5)
and that script's chat template (ChatML turns, every image as `<IMG_CONTEXT>\\n`, which the processor
expands to `<img>` + context tokens + `</img>`). Here a tile is `image_size` px (default 56 px, 14 px
patches: 16 patches shuffled to 4 tokens per tile) and at most 4 tiles, instead of 448 px and 12.
"""

from __future__ import annotations

from pathlib import Path

import torch

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.qwen2_text import build_qwen2_tokenizer, qwen2_text_config

# Qwen2.5-VL's vision tokens (InternVL3's tokenizer starts from Qwen2.5-VL's), then InternVL's own.
QWEN_VL_TOKENS = [
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip
INTERNVL_TOKENS = ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>", "<video>"]
NAMED_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}
PATCH_SIZE = 14
DOWNSAMPLE_RATIO = 0.5

# convert_internvl_weights_to_hf.py's chat template.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_internvl(
    out_dir: str | Path,
    corpus: list[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    image_size: int = 56,
    max_tiles: int = 4,
) -> Path:
    """An InternVL folder; `image_size` (a multiple of 28: the pixel shuffle halves an even patch grid) is one tile's side."""
    if image_size % (2 * PATCH_SIZE):
        raise ValueError(f"image_size must be a multiple of {2 * PATCH_SIZE} (an even grid of {PATCH_SIZE} px patches), got {image_size}")

    def write(staging: Path) -> None:
        from transformers import (
            AutoModelForImageTextToText,
            GotOcr2ImageProcessor,
            InternVLConfig,
            InternVLProcessor,
            InternVLVideoProcessor,
        )

        tokenizer = build_qwen2_tokenizer(corpus, [*QWEN_VL_TOKENS, *INTERNVL_TOKENS], NAMED_TOKENS)
        tokenizer.chat_template = CHAT_TEMPLATE
        vision = dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=[image_size, image_size],
            patch_size=[PATCH_SIZE, PATCH_SIZE],
            use_absolute_position_embeddings=True,
        )
        tokens_per_tile = int((image_size // PATCH_SIZE) ** 2 * DOWNSAMPLE_RATIO**2)
        config = InternVLConfig(
            text_config=qwen2_text_config(tokenizer, hidden_size, num_layers),
            vision_config=vision,
            image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"),
            image_seq_length=tokens_per_tile,
            downsample_ratio=DOWNSAMPLE_RATIO,
            vision_feature_layer=-1,
            vision_feature_select_strategy="default",
        )
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        normalise = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
        size = {"height": image_size, "width": image_size}
        processor = InternVLProcessor(
            image_processor=GotOcr2ImageProcessor(size=size, crop_to_patches=True, min_patches=1, max_patches=max_tiles, **normalise),
            tokenizer=tokenizer,
            video_processor=InternVLVideoProcessor(size=size, **normalise),
            image_seq_length=tokens_per_tile,
            chat_template=CHAT_TEMPLATE,
        )
        processor.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)

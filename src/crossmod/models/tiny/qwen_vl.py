"""A tiny random Qwen2-VL / Qwen2.5-VL checkpoint folder, built like a real one.

Config, weights, Qwen2's tokenizer (byte-level BPE trained on the fly, `crossmod.models.tiny.qwen2_text`) with
Qwen's special vision and chat tokens, the image processor and the chat template are written with `save_pretrained`, so tests
and CPU runs load it through the same `from_pretrained` path as `Qwen/Qwen2-VL-7B-Instruct`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen2Tokenizer

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.qwen2_text import CHAT_TOKENS, build_qwen2_tokenizer

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
SPECIAL_TOKENS = [*CHAT_TOKENS, *VISION_TOKENS]

# The chat template Qwen2-VL's processor ships: system turn, image placeholders, generation prompt.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def train_qwen_tokenizer(corpus: list[str], vocab_size: int = 800) -> Qwen2Tokenizer:
    """Qwen2's tokenizer class (byte-level BPE trained on `corpus`) with Qwen-VL's chat and vision tokens."""
    return build_qwen2_tokenizer(corpus, VISION_TOKENS, vocab_size=vocab_size)


def build_tiny_qwen_vl(
    out_dir: str | Path,
    corpus: list[str],
    version: str = "qwen2_vl",
    image_pixels: int = 56 * 56,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    intermediate_size: int | None = None,
    vision_depth: int = 2,
    vision_embed_dim: int = 32,
    vision_heads: int = 2,
) -> Path:
    """`version`: `qwen2_vl` or `qwen2_5_vl`. Images are resized to about `image_pixels` (min = max). The vision
    arguments size Qwen2-VL's tower (bench/vision_cache.py gives it a real checkpoint's tower : language-model ratio)."""
    if version not in ("qwen2_vl", "qwen2_5_vl"):
        raise ValueError(f"version must be qwen2_vl or qwen2_5_vl, got {version!r}")

    def write(staging: Path) -> None:
        from transformers import AutoConfig, AutoModelForImageTextToText, Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

        tokenizer = train_qwen_tokenizer(corpus)
        tokenizer.chat_template = CHAT_TEMPLATE
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
        head_dim = hidden_size // 2
        text = dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=intermediate_size or hidden_size * 2,
            num_hidden_layers=num_layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            bos_token_id=None,
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": _mrope_section(head_dim)},
        )
        vision = dict(
            depth=vision_depth, hidden_size=hidden_size, num_heads=vision_heads, patch_size=14, spatial_merge_size=2, temporal_patch_size=2
        )
        if version == "qwen2_vl":
            vision.update(embed_dim=vision_embed_dim)
        else:
            vision.update(hidden_size=32, out_hidden_size=hidden_size, intermediate_size=64, fullatt_block_indexes=[1], window_size=56)
        config = AutoConfig.for_model(
            version,
            text_config=text,
            vision_config=vision,
            image_token_id=ids["<|image_pad|>"],
            video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"],
            vision_end_token_id=ids["<|vision_end|>"],
        )
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
        model.generation_config.eos_token_id = ids["<|im_end|>"]
        model.generation_config.pad_token_id = ids["<|endoftext|>"]
        image_processor = Qwen2VLImageProcessor(min_pixels=image_pixels, max_pixels=image_pixels)
        video_processor = Qwen2VLVideoProcessor(min_pixels=image_pixels, max_pixels=image_pixels)
        processor = Qwen2VLProcessor(
            image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor, chat_template=CHAT_TEMPLATE
        )
        processor.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)


def _mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies over (time, height, width) like Qwen's [16, 24, 24] for 128."""
    half = head_dim // 2
    time = half // 4
    rest = half - time
    return [time, rest // 2, rest - rest // 2]

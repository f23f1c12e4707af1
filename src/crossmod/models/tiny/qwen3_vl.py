"""A tiny random Qwen3-VL checkpoint folder, built like a real one.

The tokenizer is Qwen2-VL's (`crossmod.models.tiny.qwen_vl.train_qwen_tokenizer`: same byte-level BPE, same
vision and chat special tokens). What Qwen3-VL changes, and this folder reproduces:
- the chat template: the structure `Qwen/Qwen3-VL-*-Instruct` ships in `chat_template.json` (no default
  system turn, unlike Qwen2-VL's "You are a helpful assistant."; a system turn only when the messages
  start with one; image/video placeholders `<|vision_start|><|image_pad|><|vision_end|>`), without its
  tool-calling branches;
- 16-pixel patches (Qwen2-VL: 14) merged 2×2, so one image token covers 32×32 pixels;
- DeepStack: vision layer `deepstack_visual_indexes` features are added to the first language-model
  layers (here vision layer 0 into language layer 0), each through its own `deepstack_merger_list` MLP;
- interleaved M-RoPE (`mrope_interleaved`, section split like the real 24:20:20) whose positions need
  the processor's `mm_token_type_ids` besides `image_grid_thw`;
- its own video processor (`Qwen3VLVideoProcessor`, frame timestamps in the prompt).
"""

from __future__ import annotations

from pathlib import Path

import torch

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.qwen_vl import SPECIAL_TOKENS, train_qwen_tokenizer

PATCH_SIZE = 16
MERGE_SIZE = 2

CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].content is string %}{{- messages[0].content }}{%- else %}"
    "{%- for content in messages[0].content %}{%- if 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}"
    "{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- set image_count = namespace(value=0) %}{%- set video_count = namespace(value=0) %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "{%- set image_count.value = image_count.value + 1 %}{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif content.type == 'video' or 'video' in content %}"
    "{%- set video_count.value = video_count.value + 1 %}{%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content_item in message.content %}"
    "{%- if 'text' in content_item %}{{- content_item.text }}{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tiny_qwen3_vl(
    out_dir: str | Path,
    corpus: list[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    image_size: int = 64,
) -> Path:
    """Images are resized to about `image_size`² pixels (min = max): (image_size / 32)² image tokens each."""
    if image_size % (PATCH_SIZE * MERGE_SIZE):
        raise ValueError(
            f"image_size must be a multiple of {PATCH_SIZE * MERGE_SIZE} (patch {PATCH_SIZE} × merge {MERGE_SIZE}), got {image_size}"
        )

    def write(staging: Path) -> None:
        from transformers import AutoConfig, AutoModelForImageTextToText, Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

        tokenizer = train_qwen_tokenizer(corpus)
        tokenizer.chat_template = CHAT_TEMPLATE
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
        head_dim = hidden_size // 2
        text = dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 2,
            num_hidden_layers=num_layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=head_dim,
            max_position_embeddings=4096,
            bos_token_id=None,
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": mrope_section(head_dim),
                "mrope_interleaved": True,
            },
        )
        vision = dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=PATCH_SIZE,
            spatial_merge_size=MERGE_SIZE,
            temporal_patch_size=2,
            out_hidden_size=hidden_size,
            num_position_embeddings=(image_size // PATCH_SIZE) ** 2,
            deepstack_visual_indexes=[0],
        )
        config = AutoConfig.for_model(
            "qwen3_vl",
            text_config=text,
            vision_config=vision,
            image_token_id=ids["<|image_pad|>"],
            video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"],
            vision_end_token_id=ids["<|vision_end|>"],
        )
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
        model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
        model.generation_config.pad_token_id = ids["<|endoftext|>"]
        pixels = {"shortest_edge": image_size**2, "longest_edge": image_size**2}
        common = dict(
            size=pixels, patch_size=PATCH_SIZE, merge_size=MERGE_SIZE, temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3
        )
        processor = Qwen3VLProcessor(
            image_processor=Qwen2VLImageProcessor(**common),
            tokenizer=tokenizer,
            video_processor=Qwen3VLVideoProcessor(**common),
            chat_template=CHAT_TEMPLATE,
        )
        processor.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)


def mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies over (time, height, width) in Qwen3-VL's 24:20:20 ratio (for 128)."""
    half = head_dim // 2
    height = width = half * 20 // 64
    return [half - height - width, height, width]

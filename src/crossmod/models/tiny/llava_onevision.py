"""A tiny random LLaVA-OneVision checkpoint folder (Qwen2 text + SigLIP vision), built like a real one.

Mirrors what Transformers' `convert_llava_onevision_weights_to_hf.py` writes for
`llava-hf/llava-onevision-qwen2-*-ov-hf`: Qwen2's tokenizer with `<image>` and `<video>` added,
`LlavaOnevisionProcessor` (image processor with an "anyres" grid of pinpoints, video processor,
`vision_feature_select_strategy="full"`, one image token per vision patch), a SigLIP tower without its
pooling head, `use_image_newline_parameter`, and that script's chat template (ChatML turns, every image
as `<image>\\n` before the turn's text). Here the tower sees `image_size` px crops (default 28 px, 14 px
patches: 4 tokens per crop) on a grid of up to 2×2 crops instead of 384 px on up to 6×6.
"""

from __future__ import annotations

from pathlib import Path

import torch

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.qwen2_text import build_qwen2_tokenizer, qwen2_text_config

IMAGE_TOKEN, VIDEO_TOKEN = "<image>", "<video>"
PATCH_SIZE = 14

# convert_llava_onevision_weights_to_hf.py's chat template.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{# Render all video then #}{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>\n' }}{% endfor %}"
    "{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}"
    "{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] }}{% endgeneration %}{% endfor %}{% endif %}"
    "{{'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_llava_onevision(
    out_dir: str | Path,
    corpus: list[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    image_size: int = 28,
) -> Path:
    """A LLaVA-OneVision folder; `image_size` (a multiple of 14) is the side of one crop the tower sees."""
    if image_size % PATCH_SIZE:
        raise ValueError(f"image_size must be a multiple of the {PATCH_SIZE} px patch, got {image_size}")

    def write(staging: Path) -> None:
        from transformers import (
            AutoModelForImageTextToText,
            LlavaOnevisionConfig,
            LlavaOnevisionImageProcessor,
            LlavaOnevisionProcessor,
            LlavaOnevisionVideoProcessor,
        )

        tokenizer = build_qwen2_tokenizer(corpus, [IMAGE_TOKEN, VIDEO_TOKEN])
        tokenizer.chat_template = CHAT_TEMPLATE
        vision = dict(
            model_type="siglip_vision_model",
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=image_size,
            patch_size=PATCH_SIZE,
            vision_use_head=False,
        )
        pinpoints = [[image_size * rows, image_size * cols] for rows in (1, 2) for cols in (1, 2)]
        config = LlavaOnevisionConfig(
            text_config=qwen2_text_config(tokenizer, hidden_size, num_layers),
            vision_config=vision,
            image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
            video_token_index=tokenizer.convert_tokens_to_ids(VIDEO_TOKEN),
            vision_feature_select_strategy="full",
            vision_feature_layer=-1,
            image_grid_pinpoints=pinpoints,
            use_image_newline_parameter=True,
            tie_word_embeddings=False,
        )
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        size = {"height": image_size, "width": image_size}
        processor = LlavaOnevisionProcessor(
            image_processor=LlavaOnevisionImageProcessor(size=size, image_grid_pinpoints=pinpoints),
            tokenizer=tokenizer,
            video_processor=LlavaOnevisionVideoProcessor(size=size),
            num_image_tokens=(image_size // PATCH_SIZE) ** 2,
            vision_feature_select_strategy="full",
            chat_template=CHAT_TEMPLATE,
        )
        processor.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)

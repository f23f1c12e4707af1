"""A tiny random CLIP folder: text and vision towers, tokenizer and image processor, loadable with Auto* classes."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.wordpiece import train_wordpiece


def build_tiny_clip(
    out_dir: str | Path,
    corpus: list[str],
    image_size: int = 64,
    patch_size: int = 16,
    hidden_size: int = 64,
    num_layers: int = 2,
    projection_dim: int = 32,
    vocab_size: int = 400,
    seed: int = 0,
) -> Path:
    """A CLIP folder: model (text + vision towers), tokenizer and image processor, loadable with Auto* classes."""

    def write(staging: Path) -> None:
        tokenizer = train_wordpiece(corpus, vocab_size)
        tower = dict(hidden_size=hidden_size, intermediate_size=hidden_size * 2, num_hidden_layers=num_layers, num_attention_heads=2)
        text = dict(
            vocab_size=len(tokenizer),
            max_position_embeddings=77,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            **tower,
        )
        vision = dict(image_size=image_size, patch_size=patch_size, **tower)
        torch.manual_seed(seed)
        model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection_dim))
        processor = CLIPImageProcessor(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size})
        tokenizer.save_pretrained(staging)
        processor.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)

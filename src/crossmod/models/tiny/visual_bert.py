"""A tiny random VisualBERT folder (config, weights, WordPiece tokenizer) whose visual projection takes a given width."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import VisualBertConfig, VisualBertModel

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.wordpiece import train_wordpiece


def timm_channels(model_name: str) -> int:
    """The feature width of a timm backbone (its grid vectors' channel count), read from a random-init copy."""
    import timm  # imported here: only the resolver asking for a tiny VisualBERT needs it

    return int(timm.create_model(model_name, pretrained=False, num_classes=0).num_features)


def build_tiny_visual_bert(
    out_dir: str | Path,
    corpus: list[str],
    visual_embedding_dim: int,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    vocab_size: int = 400,
    max_positions: int = 128,
    seed: int = 0,
) -> Path:
    """A tokenizer + randomly initialised `VisualBertModel` saved with `save_pretrained`, so it loads through the
    same `from_pretrained` path as `uclanlp/visualbert-*` (which ship no tokenizer; this folder carries its own)."""

    def write(staging: Path) -> None:
        tokenizer = train_wordpiece(corpus, vocab_size)
        config = VisualBertConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            visual_embedding_dim=visual_embedding_dim,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            intermediate_size=hidden_size * 4,
            max_position_embeddings=max_positions,
            pad_token_id=tokenizer.pad_token_id,
        )
        torch.manual_seed(seed)
        model = VisualBertModel(config)
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)

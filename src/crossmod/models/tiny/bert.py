"""A tiny random text encoder folder: BERT (two segment types) or XLM-R (RoBERTa-style positions, one segment type)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.wordpiece import train_wordpiece


def build_tiny_bert(
    out_dir: str | Path,
    corpus: list[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    vocab_size: int = 400,
    max_positions: int = 128,
    seed: int = 0,
    architecture: str = "bert",
) -> Path:
    """A tokenizer + randomly initialised encoder: `bert` (two segment types) or `xlmr` (RoBERTa-style
    positions after the padding index, one segment type)."""

    def write(staging: Path) -> None:
        tokenizer = train_wordpiece(corpus, vocab_size)
        common = dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            intermediate_size=hidden_size * 4,
            pad_token_id=tokenizer.pad_token_id,
        )
        torch.manual_seed(seed)
        if architecture == "bert":
            model = BertModel(BertConfig(max_position_embeddings=max_positions, **common))
        elif architecture == "xlmr":
            config = XLMRobertaConfig(
                max_position_embeddings=max_positions + tokenizer.pad_token_id + 1,
                type_vocab_size=1,
                bos_token_id=tokenizer.cls_token_id,
                eos_token_id=tokenizer.sep_token_id,
                **common,
            )
            model = XLMRobertaModel(config)
        else:
            raise ValueError(f"tiny encoder architecture must be 'bert' or 'xlmr', got {architecture!r}")
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)

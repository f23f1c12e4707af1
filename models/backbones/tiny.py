"""Build a tiny BERT-style encoder folder (tokenizer trained on a corpus + random weights).

CPU runs and tests need a text model without downloads; building one with `save_pretrained` lets
the rest of the code load it through the same `from_pretrained` path a real checkpoint takes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from filelock import FileLock
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertModel, BertTokenizerFast

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece(corpus: list[str], vocab_size: int) -> BertTokenizerFast:
    """A lower-casing WordPiece tokenizer trained on `corpus`, wrapped as a BERT tokenizer."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return BertTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def build_tiny_bert(
    out_dir: str | Path,
    corpus: list[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    vocab_size: int = 400,
    max_positions: int = 128,
    seed: int = 0,
) -> Path:
    """Write a tokenizer + randomly initialised BertModel to `out_dir` (once; later calls reuse it)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir) + ".lock"):
        if (out_dir / "config.json").is_file():
            return out_dir
        tokenizer = train_wordpiece(corpus, vocab_size)
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            intermediate_size=hidden_size * 4,
            max_position_embeddings=max_positions,
            pad_token_id=tokenizer.pad_token_id,
        )
        torch.manual_seed(seed)
        model = BertModel(config)
        staging = out_dir.with_name(out_dir.name + ".partial")
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)
        staging.rename(out_dir)
    return out_dir

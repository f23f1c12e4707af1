"""Build tiny model folders (tokenizer trained on a corpus + random weights): BERT, XLM-R, CLIP.

CPU runs and tests need models without downloads; building them with `save_pretrained` lets the
rest of the code load them through the same `from_pretrained` path a real checkpoint takes.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertModel,
    BertTokenizerFast,
    CLIPConfig,
    CLIPImageProcessor,
    CLIPModel,
    XLMRobertaConfig,
    XLMRobertaModel,
)

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece(corpus: list[str], vocab_size: int) -> BertTokenizerFast:
    """A lower-casing WordPiece tokenizer over `corpus`, wrapped as a BERT tokenizer.

    The vocabulary is chosen here rather than by `WordPieceTrainer`, whose tie-breaking follows Rust
    hash-map order and so differs between processes: specials, every character of the corpus and of
    ASCII (word-initial and `##` continuation), then whole words by frequency (ties alphabetical) up to `vocab_size`. The same
    corpus always gives the same token ids, so seeded runs are reproducible.
    """
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words = Counter(word for text in corpus for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    characters = sorted(
        {character for word in words for character in word} | set(string.ascii_lowercase + string.digits + string.punctuation)
    )
    vocab_tokens = [*SPECIAL_TOKENS, *characters, *(f"##{c}" for c in characters)]
    known = set(vocab_tokens)
    for word, _ in sorted(words.items(), key=lambda item: (-item[1], item[0])):
        if len(vocab_tokens) >= vocab_size:
            break
        if word not in known:
            vocab_tokens.append(word)
            known.add(word)
    tokenizer = Tokenizer(models.WordPiece({token: i for i, token in enumerate(vocab_tokens)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.WordPiece()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return BertTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
    )


def _build_once(out_dir: str | Path, write: Callable[[Path], None]) -> Path:
    """Write a model folder through a staging dir under a lock: concurrent ranks/tests build it once."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir) + ".lock"):
        if (out_dir / "config.json").is_file():
            return out_dir
        staging = out_dir.with_name(out_dir.name + ".partial")
        write(staging)
        staging.rename(out_dir)
    return out_dir


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

    return _build_once(out_dir, write)


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

    return _build_once(out_dir, write)

"""A deterministic lower-casing WordPiece tokenizer trained on a corpus: the tokenizer of the tiny BERT, XLM-R and CLIP."""

from __future__ import annotations

import string
from collections import Counter

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import BertTokenizerFast

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

"""BPE vocabularies trained on a corpus for the tiny VLM tokenizers: byte-level (Qwen-style) or SentencePiece-style.

Training returns a vocabulary and merges only; the family's own tokenizer class (`Qwen2Tokenizer`,
`GemmaTokenizer`, ...) is then built from them, so the saved folder carries that class's real
normalizer, pre-tokenizer and decoder and loads back exactly as a hub checkpoint's tokenizer does.
Training normalises and splits text as that class does (byte-level: Qwen2's regex; SentencePiece-style:
spaces as "▁", and words split before each "▁" so no piece spans two words, as in Gemma's vocabulary).
"""

from __future__ import annotations

import json
import string

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# The pre-tokenizer regex of Qwen2's tokenizer (the text tower of Qwen2-VL, LLaVA-OneVision and InternVL3).
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

BYTE_FALLBACK_TOKENS = [f"<0x{value:02X}>" for value in range(256)]


def train_byte_level_bpe(
    corpus: list[str], special_tokens: list[str], vocab_size: int = 800
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level BPE split like Qwen2's tokenizer: every byte is reachable, special tokens take the first ids.

    Returns `(vocab, merges)` for `Qwen2Tokenizer(vocab=..., merges=...)`.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = _byte_level_split()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer)
    return _vocab_and_merges(tokenizer)


def byte_level_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]], special_tokens: list[str]) -> Tokenizer:
    """A byte-level BPE tokenizer object from a trained vocabulary, for tokenizer classes built from one
    (`PreTrainedTokenizerFast(tokenizer_object=...)`, as Llama 3's and SmolLM2's are); special tokens never split."""
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = _byte_level_split()
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in special_tokens])
    return tokenizer


def _byte_level_split() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def train_sentencepiece_bpe(
    corpus: list[str], special_tokens: list[str], vocab_size: int = 800
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """BPE over words marked with "▁" (spaces replaced, no prefix space) and byte fallback, like Gemma's tokenizer.

    Ids: the special tokens, the 256 `<0xNN>` byte tokens (any character outside the vocabulary
    falls back to them), ASCII letters, digits and punctuation, then the learned pieces.
    Returns `(vocab, merges)` for `GemmaTokenizer(vocab=..., merges=...)`.
    """
    tokenizer = Tokenizer(models.BPE(byte_fallback=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    alphabet = sorted(set(string.ascii_letters + string.digits + string.punctuation) | {"▁"})
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[*special_tokens, *BYTE_FALLBACK_TOKENS], initial_alphabet=alphabet, show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer)
    return _vocab_and_merges(tokenizer)


def _vocab_and_merges(tokenizer: Tokenizer) -> tuple[dict[str, int], list[tuple[str, str]]]:
    model = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]
    return dict(model["vocab"]), merges

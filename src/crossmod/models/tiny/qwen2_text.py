"""The Qwen2 text tower the tiny LLaVA-OneVision and InternVL folders share: its tokenizer and its config.

Both families put a Qwen2 language model behind their vision tower and add their own image tokens to
Qwen2's tokenizer; only those extra tokens differ.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken
from transformers import Qwen2Tokenizer

from crossmod.models.tiny.bpe import train_byte_level_bpe

CHAT_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_qwen2_tokenizer(
    corpus: list[str], family_tokens: list[str], named_tokens: dict[str, str] | None = None, vocab_size: int = 800
) -> Qwen2Tokenizer:
    """Qwen2's tokenizer (byte-level BPE trained on `corpus`) with its chat tokens and the family's image tokens.

    `named_tokens` become tokenizer attributes the family's processor reads (e.g. `context_image_token`).
    EOS is `<|im_end|>` and padding `<|endoftext|>`, as in Qwen2's instruct checkpoints.
    """
    special = [*CHAT_TOKENS, *family_tokens]
    vocab, merges = train_byte_level_bpe(corpus, special, vocab_size)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=named_tokens or {},
    )
    tokenizer.add_tokens([AddedToken(token, special=True, normalized=False) for token in special], special_tokens=True)
    return tokenizer


def qwen2_text_config(tokenizer: Qwen2Tokenizer, hidden_size: int, num_layers: int) -> dict[str, Any]:
    """A Qwen2 text config sized for tests: two query heads sharing one key/value head, as Qwen2 uses GQA."""
    return dict(
        model_type="qwen2",
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )

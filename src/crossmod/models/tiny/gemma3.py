"""A tiny random Gemma 3 (Gemma 3 text + SigLIP vision) checkpoint folder, built like a real one.

Mirrors `google/gemma-3-*-it` as Transformers' `convert_gemma3_weights_orbax_to_hf.py` writes it: a
Gemma tokenizer (SentencePiece-style BPE with byte fallback, `<bos>` added) with `<start_of_turn>` /
`<end_of_turn>` and the named `image_token` `<image_soft_token>`, `boi_token` `<start_of_image>`,
`eoi_token` `<end_of_image>`; `Gemma3Processor` with its image processor (mean/std 0.5, bilinear) that
expands each `<start_of_image>` to `\\n\\n<start_of_image>` + `mm_tokens_per_image` soft tokens +
`<end_of_image>\\n\\n` and returns `token_type_ids` (1 on image tokens, which attend to each other
bidirectionally); a SigLIP tower without its head, average-pooled to `mm_tokens_per_image` tokens; EOS
for generation `<eos>` or `<end_of_turn>`. The chat template is the one `google/gemma-3-*-it` ships
(`{{ bos_token }}`, the system text folded into the first user turn, the assistant role called `model`,
each image as `<start_of_image>`). Here images are `image_size` px (default 56 px, 14 px patches, a
4×4 grid pooled to 4 tokens) instead of 896 px pooled to 256, and both sliding-window and global
attention layers appear within `num_layers`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken

from crossmod.models.tiny.bpe import train_sentencepiece_bpe
from crossmod.models.tiny.folder import build_once

BASE_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
CHAT_TOKENS = ["<start_of_turn>", "<end_of_turn>"]
NAMED_TOKENS = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}
PATCH_SIZE = 14
TOKENS_PER_IMAGE = 4

# The chat template google/gemma-3-*-it ship.
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""


def build_tiny_gemma3(
    out_dir: str | Path,
    corpus: list[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    image_size: int = 56,
) -> Path:
    """A Gemma 3 folder; `image_size` is a multiple of 28 (its patch grid pools evenly to 2×2 tokens)."""
    if image_size % (PATCH_SIZE * 2):
        raise ValueError(f"image_size must be a multiple of {PATCH_SIZE * 2} (a patch grid that pools to 2×2), got {image_size}")

    def write(staging: Path) -> None:
        from transformers import AutoModelForImageTextToText, Gemma3Config, Gemma3ImageProcessor, Gemma3Processor, GemmaTokenizer
        from transformers.image_utils import PILImageResampling

        special = [*BASE_TOKENS, *CHAT_TOKENS, *NAMED_TOKENS.values()]
        vocab, merges = train_sentencepiece_bpe(corpus, special)
        tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, extra_special_tokens=NAMED_TOKENS)
        tokenizer.add_tokens([AddedToken(token, special=True, normalized=False) for token in CHAT_TOKENS], special_tokens=True)
        tokenizer.chat_template = CHAT_TEMPLATE
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in special}
        head_dim = hidden_size // 2
        text = dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 2,
            num_hidden_layers=num_layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=head_dim,
            query_pre_attn_scalar=head_dim,
            max_position_embeddings=4096,
            sliding_window=512,
            layer_types=["full_attention" if (i + 1) % 2 == 0 else "sliding_attention" for i in range(num_layers)],
            pad_token_id=ids["<pad>"],
            bos_token_id=ids["<bos>"],
            eos_token_id=ids["<eos>"],
        )
        vision = dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=image_size,
            patch_size=PATCH_SIZE,
            vision_use_head=False,
        )
        config = Gemma3Config(
            text_config=text,
            vision_config=vision,
            mm_tokens_per_image=TOKENS_PER_IMAGE,
            boi_token_index=ids["<start_of_image>"],
            eoi_token_index=ids["<end_of_image>"],
            image_token_index=ids["<image_soft_token>"],
        )
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config)
        model.generation_config.bos_token_id = ids["<bos>"]
        model.generation_config.eos_token_id = [ids["<eos>"], ids["<end_of_turn>"]]
        model.generation_config.pad_token_id = ids["<pad>"]
        image_processor = Gemma3ImageProcessor(
            size={"height": image_size, "width": image_size},
            image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
            resample=PILImageResampling.BILINEAR,
        )
        processor = Gemma3Processor(
            image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE, image_seq_length=TOKENS_PER_IMAGE
        )
        processor.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)

    return build_once(out_dir, write)

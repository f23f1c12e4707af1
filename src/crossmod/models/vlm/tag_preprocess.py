"""Preprocessor of the tag generator: one chat per meme whose answer is its social tags "tag1, tag2, …".

The user turn shows the meme's image and the prompt, whose `{title}`, `{ocr_text}`, `{text}` … fields are
filled from the meme (its text and its source's string fields in `meta`); the assistant turn is the gold
tags as the family's own chat template closes a turn (Qwen: "tag1, tag2<|im_end|>"). The batch holds the
whole chat, left-padded, and `answer`: `labels` (-100 on padding, prompt and image tokens; the token ids
on the answer), `lengths` (answer tokens per row) and `truncated` (rows whose answer lost its tail to
`max_length`). The prompt is always a prefix of the chat, so cutting each row's answer off again gives
the batch generation starts from (`prompt_only`); one collation serves the loss and generation.

`max_length` counts every token, image tokens included. A longer meme loses the tail of its answer
(counted in `truncated`, logged as `train/truncated_answers`), never prompt or image tokens; a meme whose
prompt alone reaches `max_length` is an error naming it.
"""

from __future__ import annotations

import string
from typing import Any

import torch
from PIL import Image

from crossmod.data.heads import HeadSpecs, label_tensors, parse_heads
from crossmod.models.vlm.families import family_for
from crossmod.models.vlm.preprocess import image_key, load_processor, meme_image, pixel_settings, render_chat

TAG_SEPARATOR = ", "
IGNORE = -100  # the label the loss skips


def format_tags(tags: list[str]) -> str:
    """The target text: the tags in their given order, comma-separated."""
    return TAG_SEPARATOR.join(tags)


def parse_tags(text: str) -> list[str]:
    """A generation → its tags: split at commas, stripped, empty pieces dropped, repeats kept once (first place)."""
    tags = [piece.strip() for piece in text.split(",")]
    return list(dict.fromkeys(tag for tag in tags if tag))


def per_token_keys(batch: dict[str, Any]) -> list[str]:
    """The batch's tensors with one value per token (input ids, attention mask, token types …), not pixels."""
    shape = batch["input_ids"].shape
    return [
        key
        for key, value in batch.items()
        if isinstance(value, torch.Tensor) and value.shape == shape and not key.startswith(("pixel", "image"))
    ]


def cut_row_tails(tensors: dict[str, torch.Tensor], cuts: torch.Tensor, pads: dict[str, int]) -> dict[str, torch.Tensor]:
    """Drop the last `cuts[i]` tokens of row i of left-padded (batch, length) tensors, `attention_mask` among them;
    rows stay right-aligned (new padding on the left: `pads[key]`, else 0) and columns that are padding in
    every row are removed."""
    mask = tensors["attention_mask"]
    cuts = cuts.to(mask.device)
    source = torch.arange(mask.shape[1], device=mask.device)[None, :] - cuts[:, None]  # the column each column is read from
    valid = source >= 0
    out = {}
    for key, tensor in tensors.items():
        moved = tensor.gather(1, source.clamp(min=0))
        out[key] = torch.where(valid, moved, torch.full_like(tensor, pads.get(key, 0)))
    real_columns = out["attention_mask"].bool().any(dim=0)
    keep_from = int(real_columns.int().argmax()) if real_columns.any() else mask.shape[1]
    return {key: tensor[:, keep_from:] for key, tensor in out.items()}


def prompt_only(batch: dict[str, Any], pad_token_id: int) -> dict[str, Any]:
    """The batch with every row's answer cut off: the left-padded prompts generation continues from."""
    keys = per_token_keys(batch)
    cut = cut_row_tails({key: batch[key] for key in keys}, batch["answer"]["lengths"], {"input_ids": pad_token_id})
    return {**{k: v for k, v in batch.items() if k != "answer"}, **cut}


class TagPreprocessor:
    def __init__(
        self,
        heads: HeadSpecs,
        processor: str,
        prompt: str,
        image_size: int | None = 512,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        max_length: int = 512,
        family: str | dict[str, Any] | None = "auto",
    ) -> None:
        """`heads`: the dataset's heads (not predicted; batches carry their labels as every family's do)."""
        fields = [name for _, name, _, _ in string.Formatter().parse(prompt) if name is not None]
        if "tags" in fields:
            raise ValueError("model.preprocessor.prompt shows {tags}: the prompt would hold the answer the generator is trained to write")
        if any(not name.isidentifier() for name in fields):
            raise ValueError(f"model.preprocessor.prompt: fields must be plain names like {{title}}, got {fields}")
        if max_length < 2:
            raise ValueError(f"model.preprocessor.max_length must be at least 2, got {max_length}")
        self.heads = parse_heads(heads)
        self.source, self.family = processor, family_for(processor, family)
        self.processor = load_processor(processor, self.family, "left", min_pixels, max_pixels)
        self.prompt, self.image_size, self.max_length = prompt, image_size, int(max_length)
        self._pixel_settings = pixel_settings(self.processor, image_size)
        self._template_checked = False

    @property
    def needs(self) -> frozenset[str]:
        return frozenset({"image"})

    @property
    def pad_token_id(self) -> int:
        return int(self.processor.tokenizer.pad_token_id)

    def _user_text(self, sample: dict[str, Any]) -> str:
        meta = sample.get("meta") or {}
        fields = {key: value for key, value in meta.items() if isinstance(value, str)} | {"text": sample.get("text") or ""}
        try:
            return self.prompt.format_map(fields)
        except KeyError as error:
            raise ValueError(
                f"sample {sample.get('id')}: the tag prompt asks for {{{error.args[0]}}}, which this meme does not have "
                f"(fields: {sorted(fields)})"
            ) from None

    def _image(self, sample: dict[str, Any]) -> Image.Image:
        if sample.get("image") is None:
            raise ValueError(f"sample {sample.get('id')}: no image; the tag generator writes a meme's tags from its image")
        return meme_image(sample, self.image_size)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        meta = sample.get("meta") or {}
        if not isinstance(meta.get("tags"), list):
            raise ValueError(
                f"sample {sample.get('id')}: no tag list in meta.tags; the tag generator learns and is scored on a "
                "dataset's social tags (ToxicTags)"
            )
        gold = [str(tag) for tag in meta["tags"]]
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": self._user_text(sample)}]}]
        prompt = render_chat(self.processor, self.source, messages)
        answer_turn = {"role": "assistant", "content": [{"type": "text", "text": format_tags(gold)}]}
        full = render_chat(self.processor, self.source, [*messages, answer_turn], add_generation_prompt=False)
        if not full.startswith(prompt):
            raise ValueError(
                f"the chat template of {self.source!r} does not continue the generation prompt with the answer turn: "
                f"prompt {prompt[-80:]!r}, chat {full[len(prompt) - 80 : len(prompt) + 40]!r}"
            )
        full = prompt + full[len(prompt) :].rstrip()  # the answer up to its end-of-turn token
        if not self._template_checked:
            if self.family.image_placeholder not in prompt:
                raise ValueError(
                    f"the chat template of {self.source!r} ({self.family.name}) wrote no image placeholder "
                    f"{self.family.image_placeholder!r}: the image would not reach the model. Rendered: {prompt[:300]!r}"
                )
            self._template_checked = True
        tokenize = self.processor.tokenizer
        prompt_ids = tokenize(prompt, add_special_tokens=False)["input_ids"]
        full_ids = tokenize(full, add_special_tokens=False)["input_ids"]
        if full_ids[: len(prompt_ids)] != prompt_ids or len(full_ids) == len(prompt_ids):
            raise ValueError(f"sample {sample.get('id')}: the answer's tokens do not follow the prompt's (they merge across the turn)")
        return {
            "id": sample["id"],
            "labels": sample["labels"],
            "chat": full,
            "image": self._image(sample),
            "image_key": image_key(self._pixel_settings, sample),
            "answer_ids": full_ids[len(prompt_ids) :],
            "gold_tags": gold,
        }

    def collate(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        inputs = dict(
            self.processor(
                text=[f["chat"] for f in features],
                images=[[f["image"]] for f in features],
                padding=True,
                add_special_tokens=False,
                return_tensors="pt",
            )
        )
        ids = inputs["input_ids"]
        width = ids.shape[1]
        lengths = torch.tensor([len(f["answer_ids"]) for f in features], dtype=torch.long)
        labels = torch.full_like(ids, IGNORE)
        for row, feature in enumerate(features):
            tail = ids[row, width - len(feature["answer_ids"]) :]
            if tail.tolist() != feature["answer_ids"]:
                raise ValueError(f"sample {feature['id']}: the processor's tokens of the answer differ from the tokenizer's")
            labels[row, width - len(feature["answer_ids"]) :] = tail
        real = inputs["attention_mask"].sum(dim=1)
        prompt_lengths = real - lengths
        for row in torch.nonzero(prompt_lengths >= self.max_length).flatten().tolist():
            raise ValueError(
                f"sample {features[row]['id']}: its prompt alone is {int(prompt_lengths[row])} tokens (image tokens included), "
                f"model.preprocessor.max_length is {self.max_length}: raise it, or lower model.preprocessor.image_size"
            )
        cuts = (real - self.max_length).clamp(min=0)
        if cuts.any():
            tensors = {key: inputs[key] for key in per_token_keys(inputs)} | {"labels": labels}
            cut = cut_row_tails(tensors, cuts, {"input_ids": self.pad_token_id, "labels": IGNORE})
            labels = cut.pop("labels")
            inputs.update(cut)
            lengths = lengths - cuts
        return {
            "ids": [f["id"] for f in features],
            **inputs,
            "answer": {"labels": labels, "lengths": lengths, "truncated": int((cuts > 0).sum())},
            "gold_tags": [f["gold_tags"] for f in features],
            "image_keys": [[f["image_key"]] for f in features],
            "labels": label_tensors(features, self.heads),
        }

"""Preprocessor of the VLM family: chat prompt per meme (in workers), one processor call per batch.

Any image-text-to-text family: its own processor renders the chat template and returns the tensors its
model takes; the family row (`crossmod.models.vlm.families`) says which placeholder marks an image in the
rendered chat and what precedes an answer letter. The template writes the special tokens the model
expects (BOS included), so the processor is told not to add them again.

Images are resized to the study's square size (512×512 by default) and bounded by min/max pixels in
the processor; a meme without an image gets a placeholder when the prompt shows images, so every
rank runs the vision tower on every step. Batches are left-padded (generation needs it; the head and
verbalizer read the last real token either way) and carry each item's answer-option token ids.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers import AutoProcessor

from crossmod.data.heads import HeadSpecs, group_counts, group_votes, head_votes, label_tensors, parse_heads, vote_shares
from crossmod.models.model_folders import refuse_shipped_code
from crossmod.models.vlm.families import VLMFamily, family_for
from crossmod.models.vlm.prompts import PromptSpec


def load_processor(
    source: str, family: VLMFamily, padding_side: str = "left", min_pixels: int | None = None, max_pixels: int | None = None
) -> Any:
    """A family's own processor, padding on `padding_side`, its resizing bounded by min/max pixels (dynamic-resolution families only)."""
    refuse_shipped_code(source)
    try:
        processor = AutoProcessor.from_pretrained(source, trust_remote_code=False)
    except ValueError as error:
        if "custom code" not in str(error):
            raise
        raise ValueError(
            f"{source}: the model folder asks to run its own Python (an `auto_map` in its configs); crossmod loads models with "
            "trust_remote_code=False and never runs a folder's code: use a checkpoint of a model type Transformers supports"
        ) from None
    processor.tokenizer.padding_side = padding_side
    if min_pixels is not None or max_pixels is not None:
        if not family.pixel_bounds:
            raise ValueError(
                f"min_pixels/max_pixels bound the pixel count of dynamic-resolution processors (Qwen-VL); {family.name} "
                "resizes to its own fixed size: leave them null (model.preprocessor.image_size sets the meme's size)"
            )
        image_processor = processor.image_processor
        size = dict(image_processor.size)
        size.update({k: v for k, v in (("shortest_edge", min_pixels), ("longest_edge", max_pixels)) if v is not None})
        image_processor.size = size
    return processor


def template_file(source: str) -> str:
    """The file a folder's chat template comes from (the folder itself when none holds one, e.g. a hub id)."""
    folder = Path(source)
    for name in ("chat_template.jinja", "chat_template.json", "processor_config.json", "tokenizer_config.json"):
        path = folder / name
        if path.is_file() and (name.startswith("chat_template") or '"chat_template"' in path.read_text(encoding="utf-8", errors="replace")):
            return str(path)
    return str(source)


def render_chat(processor: Any, source: str, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """The chat as the model's template writes it; a template that fails or that the sandbox refuses (Transformers
    renders templates in jinja's sandbox) is a ValueError naming its file."""
    from jinja2 import TemplateError

    try:
        return processor.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    except TemplateError as error:
        raise ValueError(
            f"{template_file(source)}: the chat template cannot be rendered ({type(error).__name__}: {error}); "
            "use the checkpoint's own template (e.g. the chat_template.jinja of the model it was made from)"
        ) from None


def pixel_settings(processor: Any, image_size: int | None) -> bytes:
    """Every setting that changes the pixels an image becomes (the image processor's own and the meme resize),
    as bytes that start each image's vision-cache key."""
    settings = {"image_processor": json.loads(processor.image_processor.to_json_string()), "image_size": image_size}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).digest()


def image_key(settings: bytes, sample: dict[str, Any]) -> str:
    """The vision-cache key of a meme's image: its bytes (or the placeholder's marker) under these pixel settings."""
    data = sample.get("image")
    return hashlib.sha256(settings + (b"grey placeholder" if data is None else b"image:" + data)).hexdigest()


def meme_image(sample: dict[str, Any], image_size: int | None = 512) -> Image.Image:
    """The meme's image as RGB, resized to `image_size` squared (None: as found); a grey placeholder when it has none."""
    size = (image_size or 512,) * 2
    if sample.get("image") is None:
        return Image.new("RGB", size, (127, 127, 127))
    try:
        with Image.open(io.BytesIO(sample["image"])) as image:
            image = image.convert("RGB")
    except Exception as error:  # noqa: BLE001 - re-raised with the sample named
        raise ValueError(f"sample {sample.get('id')}: image cannot be decoded ({error})") from error
    return image.resize(size, Image.BICUBIC) if image_size else image


class VLMPreprocessor:
    def __init__(
        self,
        heads: HeadSpecs,
        processor: str,
        prompt: dict[str, Any],
        image_size: int | None = 512,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        family: str | dict[str, Any] | None = "auto",
        padding_side: str = "left",
    ) -> None:
        """`padding_side`: left (what batched generation needs); the head and verbalizer read either."""
        self.heads = parse_heads(heads)
        self.groups: list[str] | None = None  # the annotator groups whose votes batches carry (set by annotator_groups)
        self.source, self.family = processor, family_for(processor, family)
        self.processor = load_processor(processor, self.family, padding_side, min_pixels, max_pixels)
        self.prompt = PromptSpec(**prompt)
        # country=head: each meme is asked once per head, in that head's country (rows meme-major, heads in this order)
        self.asked_heads = list(self.heads) if self.prompt.country == "head" else []
        self._countries: list[str | None] = self.prompt.countries_for_heads(self.asked_heads) if self.asked_heads else [None]
        self.image_size = image_size
        self._pixel_settings = pixel_settings(self.processor, image_size)
        self._option_ids: dict[str, tuple[int, int]] = {}
        self._template_checked = False
        self._chat({"text": "", "lang": "en"}, self._countries[0])  # a template the sandbox refuses stops here, in the main process, named

    @property
    def needs(self) -> frozenset[str]:
        """The caption when the prompt shows it; an image-less meme gets the documented placeholder image."""
        return frozenset({"text"}) if self.prompt.input in ("image_caption", "caption") else frozenset()

    def ask_with(self, index: int) -> None:
        """Ask with the prompt spec's `index`-th wording from now on (zero-shot answers every meme once per wording):
        the answer options' token ids are looked up again for it."""
        self.prompt = replace(self.prompt, index=index)
        self._option_ids.clear()

    def option_ids(self, lang: str) -> tuple[int, int]:
        """Token ids of (hate option, non-hate option) as the model's first answer token; each must be one token."""
        if lang not in self._option_ids:
            options = self.prompt.options(lang)
            ids = []
            for letter in (options.hate, options.non_hate):
                answer = self.family.answer_prefix + letter
                tokens = self.processor.tokenizer.encode(answer, add_special_tokens=False)
                if len(tokens) != 1:
                    raise ValueError(
                        f"answer option {answer!r} ({lang}) is {len(tokens)} tokens for this tokenizer; the verbalizer needs one"
                    )
                ids.append(tokens[0])
            self._option_ids[lang] = (ids[0], ids[1])
        return self._option_ids[lang]

    def _image(self, sample: dict[str, Any]) -> Image.Image:
        return meme_image(sample, self.image_size)

    def _chat(self, sample: dict[str, Any], country: str | None = None) -> str:
        messages = self.prompt.message(sample["text"], sample.get("lang") or "en", country)
        return render_chat(self.processor, self.source, messages)

    def length(self, sample: dict[str, Any]) -> int:
        """Tokens of the meme's rendered chat, the image's placeholder counted once (`data.group_by_length`
        sorts by this). With `image_size` set every meme's image expands to the same number of tokens, so
        this orders memes by their true length; with native sizes (`image_size: null`) the image part,
        which then varies, is not counted."""
        chat = self._chat(sample, self._countries[0])
        return len(self.processor.tokenizer(chat, add_special_tokens=False)["input_ids"]) * len(self._countries)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        lang = sample.get("lang") or "en"
        chats = [self._chat(sample, country) for country in self._countries]
        image = self._image(sample) if self.prompt.input != "caption" else None
        if image is not None and not self._template_checked:
            chat = chats[0]
            if self.family.image_placeholder not in chat:
                raise ValueError(
                    f"the chat template of {self.source!r} ({self.family.name}) wrote no image placeholder "
                    f"{self.family.image_placeholder!r}: the image would not reach the model. Rendered: {chat[:300]!r}"
                )
            self._template_checked = True
        key = image_key(self._pixel_settings, sample) if image is not None else None
        return {
            "id": sample["id"],
            "labels": sample["labels"],
            "votes": head_votes(sample),
            **({"group_votes": group_votes(sample)} if self.groups is not None else {}),
            "chats": chats,
            "image": image,
            "image_key": key,
            "options": self.option_ids(lang),
        }

    def collate(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        """One row per chat: per meme, or per meme and head (meme-major) when each head is asked in its country."""
        rows = [(f, chat) for f in features for chat in f["chats"]]
        images = [[f["image"]] for f, _ in rows] if features[0]["image"] is not None else None  # one image per chat
        inputs = self.processor(text=[chat for _, chat in rows], images=images, padding=True, add_special_tokens=False, return_tensors="pt")
        batch: dict[str, Any] = {"ids": [f["id"] for f in features], **inputs}
        if images is not None:
            batch["image_keys"] = [[f["image_key"]] for f, _ in rows]  # per row, its images' cache keys in order
        batch["option_ids"] = torch.tensor([f["options"] for f, _ in rows], dtype=torch.long)
        batch["labels"] = label_tensors(features, self.heads)
        batch["vote_shares"] = vote_shares(features, self.heads)
        if self.groups is not None:  # annotator_groups: the votes of its groups, [memes, groups, 2]
            batch["group_votes"] = group_counts(features, self.groups)
        if self.asked_heads:
            batch["asked_heads"] = list(self.asked_heads)
        return batch

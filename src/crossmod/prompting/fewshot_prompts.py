"""Multi-image few-shot chats for any VLM family, answered by batched greedy generation.

A chat is one user turn per exemplar, each followed by an assistant turn holding that exemplar's
answer, then the query's user turn; every user turn is the meme's image, its title and caption/OCR text
(`meme` template) and the stage's question, and the first one opens with the instruction. The family's
own processor renders the chat template and expands the images (src/crossmod/models/vlm/families.py says which
placeholder marks an image; a template that drops one is an error, not a text-only prompt). Generation
is greedy (the study's temperature 0.001), left-padded, `max_new_tokens` (the study's 30).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
from torch import nn

from crossmod.evaluation.fewshot_scores import STAGE_CLASSES, STAGE_HEADS
from crossmod.models.model_folders import refuse_shipped_code
from crossmod.models.vlm.cached_vision import CachedVision
from crossmod.models.vlm.classifier import resolve_attn_implementation, resolve_dtype
from crossmod.models.vlm.families import family_for
from crossmod.models.vlm.preprocess import render_chat
from crossmod.models.vlm.vision_cache import VisionFeatureStore
from crossmod.prompting.chat_answers import ChatBatches, GreedyAnswers, answer_chats


def stage_label(record: Mapping[str, Any], stage: int) -> int | None:
    """The meme's class index in `stage` (None: not asked in that stage, e.g. undecided memes in stage II)."""
    return record["labels"].get(STAGE_HEADS[stage])


@dataclass(frozen=True)
class FewShotPrompt:
    """The texts of the prompt (`fewshot.prompt` in the recipe)."""

    instruction: str
    meme: str  # with {title} and {ocr_text}
    questions: Mapping[int, str]  # stage → question listing that stage's answers

    @classmethod
    def from_config(cls, texts: Mapping[str, Any]) -> FewShotPrompt:
        missing = {"instruction", "meme", "questions"} - set(texts)
        if missing:
            raise ValueError(f"fewshot.prompt lacks {sorted(missing)}")
        questions = {int(stage): str(q) for stage, q in dict(texts["questions"]).items()}
        for stage, classes in STAGE_CLASSES.items():
            question = questions.get(stage)
            if question is None or not all(word in question.casefold() for word in classes):
                raise ValueError(f"fewshot.prompt.questions.{stage} must name every answer of stage {stage}: {list(classes)}")
        return cls(str(texts["instruction"]), str(texts["meme"]), questions)

    def user_turn(self, record: Mapping[str, Any], stage: int, first: bool) -> dict[str, Any]:
        meta = record.get("meta", {})
        text = self.meme.format(title=meta.get("title", ""), ocr_text=meta.get("ocr_text", "")) + self.questions[stage]
        content: list[dict[str, Any]] = [{"type": "text", "text": self.instruction}] if first and self.instruction else []
        return {"role": "user", "content": [*content, {"type": "image"}, {"type": "text", "text": text}]}

    def messages(self, exemplars: Sequence[Mapping[str, Any]], query: Mapping[str, Any], stage: int) -> list[dict[str, Any]]:
        """Exemplar turns with their answers, then the query's turn (the generation prompt follows it)."""
        chat: list[dict[str, Any]] = []
        for position, exemplar in enumerate(exemplars):
            label = stage_label(exemplar, stage)
            if label is None:
                raise ValueError(f"exemplar {exemplar['id']} has no stage {stage} label")
            answer = STAGE_CLASSES[stage][label]
            chat += [self.user_turn(exemplar, stage, position == 0), {"role": "assistant", "content": [{"type": "text", "text": answer}]}]
        return [*chat, self.user_turn(query, stage, not exemplars)]


class PretrainedVLM(nn.Module):
    """A base image-text-to-text model (no adapter), loaded when Lightning builds it: under ZeRO-3 into partitions."""

    def __init__(self, name_or_path: str, dtype: str, attn_implementation: str) -> None:
        super().__init__()
        self.name_or_path, self.dtype_name, self.attn_implementation = name_or_path, dtype, attn_implementation
        self.model: nn.Module | None = None

    def configure_model(self) -> None:
        from transformers import AutoModelForImageTextToText

        if self.model is None:
            refuse_shipped_code(self.name_or_path)
            self.model = AutoModelForImageTextToText.from_pretrained(
                self.name_or_path,
                dtype=resolve_dtype(self.dtype_name),
                attn_implementation=resolve_attn_implementation(self.attn_implementation),
                trust_remote_code=False,
            ).eval()


class FewShotGenerator:
    """A base VLM (no adapter) answering rendered few-shot chats in batches, through Lightning's predict loop on the
    `trainer=` group's devices (src/crossmod/prompting/chat_answers.py)."""

    def __init__(
        self,
        name_or_path: str,
        trainer: L.Trainer,
        family: str | dict[str, Any] | None = "auto",
        dtype: str = "auto",
        attn_implementation: str = "auto",
        image_size: int | None = 512,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        batch_size: int = 4,
        max_new_tokens: int = 30,
        num_workers: int = 0,
        vision_cache: bool | str = "auto",
        vision_cache_dir: str | None = None,
    ) -> None:
        """`vision_cache`/`vision_cache_dir`: as `model.fusion`'s; the base is frozen, so `auto` caches whenever a folder is set."""
        from transformers import AutoProcessor

        self.family, self.source = family_for(name_or_path, family), name_or_path
        refuse_shipped_code(name_or_path)
        self.processor = AutoProcessor.from_pretrained(name_or_path, trust_remote_code=False)
        if min_pixels is not None or max_pixels is not None:
            if not self.family.pixel_bounds:
                raise ValueError(
                    f"min_pixels/max_pixels bound dynamic-resolution processors (Qwen-VL); {self.family.name} has a fixed size"
                )
            size = dict(self.processor.image_processor.size)
            size.update({k: v for k, v in (("shortest_edge", min_pixels), ("longest_edge", max_pixels)) if v is not None})
            self.processor.image_processor.size = size
        self.batches = ChatBatches(self.processor, image_size, images_required=True)
        cache = None
        if vision_cache is not False and vision_cache_dir:
            cache = CachedVision(VisionFeatureStore.open(vision_cache_dir, name_or_path, self.family.name, resolve_dtype(dtype)))
        elif vision_cache is True:
            raise ValueError("model.fusion.vision_cache=true needs model.fusion.vision_cache_dir")
        self.module = GreedyAnswers(
            PretrainedVLM(name_or_path, dtype, attn_implementation),
            lambda vlm: vlm.model,
            self.processor.tokenizer,
            max_new_tokens,
            vision_cache=lambda _: cache,
        )
        self.trainer, self.batch_size, self.num_workers = trainer, batch_size, num_workers

    def render(self, messages: list[dict[str, Any]], images: int) -> str:
        chat = render_chat(self.processor, self.source, messages)
        if chat.count(self.family.image_placeholder) < images:
            raise ValueError(
                f"the chat template ({self.family.name}) wrote {chat.count(self.family.image_placeholder)} image placeholders "
                f"{self.family.image_placeholder!r} for {images} images: the images would not reach the model"
            )
        return chat

    def answer(self, chats: Sequence[tuple[list[dict[str, Any]], list[Mapping[str, Any]]]]) -> list[str]:
        """Greedy generations for (messages, memes shown in order) pairs, every chat answered once, in order."""
        items = [{"chat": self.render(messages, len(memes)), "memes": list(memes)} for messages, memes in chats]
        rows = answer_chats(self.trainer, self.module, items, self.batches, self.batch_size, self.num_workers)
        return [row["generation"] for row in rows]

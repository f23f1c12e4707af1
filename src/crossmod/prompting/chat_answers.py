"""Greedy answers through Lightning's predict loop: the one generation wrapper zero-shot, few-shot and MemeBridge
prompting run (zero-shot batches carry their option letters, and get P(hate) from the first generated step too).

The `trainer=` group decides where, as for training: device, precision, processes, and ZeRO-3 for a model larger
than one device (built straight into partitions; ranks given equal chat counts and generating with synced steps,
so answers of different lengths never leave a rank waiting on a collective the others skipped). Images are decoded
and resized in the loader's workers, and the processor's batch is built there too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from PIL import Image
from torch import nn

from crossmod.inference.scoring import predict_in_order
from crossmod.models.sharding import is_zero3, tell_transformers, zero3_config
from crossmod.models.vlm.cached_vision import CachedVision
from crossmod.models.vlm.classifier import model_inputs
from crossmod.models.vlm.preprocess import image_key, meme_image, pixel_settings


class ChatBatches:
    """{"chat": rendered text, "memes": records shown in order} → the processor's left-padded batch. Picklable (only
    the processor travels to the loader's workers, never the model)."""

    def __init__(self, processor: Any, image_size: int | None, images_required: bool) -> None:
        self.processor, self.image_size, self.images_required = processor, image_size, images_required
        self.processor.tokenizer.padding_side = "left"  # generation continues from the last position of every row
        self._pixel_settings = pixel_settings(processor, image_size)

    def _image(self, meme: dict[str, Any]) -> Image.Image:
        if self.images_required and meme.get("image") is None:
            raise ValueError(f"meme {meme['id']} has no image; the prompt shows every meme's image")
        return meme_image(meme, self.image_size)

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        images = [self._image(meme) for meme in item["memes"]]
        return {"chat": item["chat"], "images": images, "image_keys": [image_key(self._pixel_settings, meme) for meme in item["memes"]]}

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.processor(
            text=[item["chat"] for item in items],
            images=[item["images"] for item in items],
            padding=True,
            add_special_tokens=False,
            return_tensors="pt",
        )
        return {**batch, "image_keys": [item["image_keys"] for item in items]}  # per row, its images' cache keys in order


def answer_lengths(generated: torch.Tensor, eos_token_id: int | list[int] | None) -> torch.Tensor:
    """Tokens each answer took, its end token included (= max_new_tokens: the answer may have been cut off)."""
    ends = [] if eos_token_id is None else eos_token_id if isinstance(eos_token_id, list) else [eos_token_id]
    ended = torch.isin(generated, torch.tensor(ends, dtype=generated.dtype, device=generated.device))
    return torch.where(ended.any(1), ended.int().argmax(1) + 1, generated.shape[1])


class GreedyAnswers(L.LightningModule):
    """The model's greedy answer to each prompt of the batch, how many tokens it took, and (when the batch carries
    `option_ids`, the two option letters' token ids) P(hate) from the first generated step's logits of those letters.

    `model`: a module with `configure_model` (built by Lightning inside the strategy's init context) and `generator`
    the Transformers model that generates, taken from it once built."""

    def __init__(
        self,
        model: nn.Module,
        generator: Callable[[nn.Module], Any],
        tokenizer: Any,
        max_new_tokens: int,
        vision_cache: Callable[[nn.Module], CachedVision | None] | None = None,
    ) -> None:
        """`vision_cache`: the built model's cached-features path (src/crossmod/models/vlm/cached_vision.py), or None."""
        super().__init__()
        self.model, self.generator, self.tokenizer, self.max_new_tokens = model, generator, tokenizer, max_new_tokens
        self.vision_cache = vision_cache

    def configure_model(self) -> None:
        config = zero3_config(self.trainer.strategy)
        if config is not None:  # Transformers' from_pretrained then loads into partitions; kept alive (weak reference)
            self._transformers_zero3 = tell_transformers(config)
        self.model.configure_model()

    def teardown(self, stage: str) -> None:
        cache = self.vision_cache(self.model) if self.vision_cache is not None and self.model is not None else None
        if cache is not None:
            cache.end_stage(stage)

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        generator = self.generator(self.model)
        inputs = model_inputs({k: v for k, v in batch.items() if k != "index"})
        cache = self.vision_cache(self.model) if self.vision_cache is not None else None
        if cache is not None:
            inputs = cache.inputs(generator.model, inputs, batch.get("image_keys"))
        scored = "option_ids" in batch
        out = generator.generate(
            **inputs,
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            output_scores=scored,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id,
            synced_gpus=is_zero3(self.trainer.strategy),  # sharded forwards are collectives: ranks step until all are done
        )
        generated = out.sequences[:, inputs["input_ids"].shape[1] :]
        answer = {
            "index": batch["index"],
            "generation": self.tokenizer.batch_decode(generated, skip_special_tokens=True),
            "tokens": answer_lengths(generated, generator.generation_config.eos_token_id),
        }
        if scored:
            options = out.scores[0].float().log_softmax(-1).gather(1, batch["option_ids"])
            answer["p_hate"] = torch.softmax(options, dim=1)[:, 0]
        return answer


def answer_chats(
    trainer: L.Trainer, module: GreedyAnswers, items: list[dict[str, Any]], batches: ChatBatches, batch_size: int, num_workers: int = 0
) -> list[dict[str, Any]]:
    """`{"generation", "tokens"}` for every item, in item order, on every rank (each item answered once)."""
    rows = predict_in_order(trainer, module, items, batch_size, batches, num_workers)
    return [{"generation": row["generation"], "tokens": row["tokens"][0]} for row in rows]

"""Per batch: read every image's features from the cache, or encode the batch once and keep what was missing.

A batch takes the cached path only when all its images are stored; otherwise the tower encodes the whole
batch (as without a cache: a cold epoch costs what it did) and the missing entries are written. Either way
the language model receives the features through `mm_encoder_outputs`, so both paths compute the same.
Under ZeRO-3 the tower's forward is a collective (each layer gathers its partitioned weights), so ranks
agree on the path first: one all-reduce of a flag on a CPU (gloo) group, which never waits for the GPU.

When the cache may be used is decided once, from the model: every parameter that feeds the features
must be frozen (no `freeze_vision=false`, no vision LoRA, no trainable projector or LLaVA-OneVision's
`image_newline` under full fine-tuning) and the tower must run without dropout.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from crossmod.models.vlm.families import VLMFamily
from crossmod.models.vlm.image_features import assemble, encode, image_token_id, layout, split_per_image, without_pixels
from crossmod.models.vlm.vision_cache import DamagedCacheEntry, VisionFeatureStore

log = logging.getLogger(__name__)


def cache_refusal(model: nn.Module, family: VLMFamily, vision_lora: bool) -> str | None:
    """Why the image features are not a fixed function of the image (None: they are)."""
    if vision_lora:
        return "model.fusion.vision_lora=true trains LoRA weights inside the vision tower"
    language = re.compile(rf"(?:{family.language_model}|lm_head)(?:\.|$)")
    for name, parameter in model.named_parameters():
        if parameter.requires_grad and not language.match(name):
            return f"{name} trains (model.fusion.freeze_vision=false or full_finetune trains what makes the image features)"
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout) and module.p > 0 and name and not language.match(name):
            return f"{name} drops activations at random (p={module.p}) while training"
    vision_config = getattr(model.config, "vision_config", None)
    for key, value in (vision_config.to_dict() if vision_config is not None else {}).items():
        if "dropout" in key and isinstance(value, (int, float)) and value > 0:
            return f"the vision config's {key}={value} makes the features random while training"
    return None


class CachedVision:
    """The cached-features path of one model (see the module docstring)."""

    def __init__(self, store: VisionFeatureStore) -> None:
        self.store = store
        self._group: Any = None
        self._sharded: bool | None = None
        self._uncut_logged = False

    def _agree(self, base: nn.Module, all_stored: bool) -> bool:
        """Under ZeRO-3: whether every rank's batch is fully stored (otherwise all ranks run the tower)."""
        if self._sharded is None:
            from crossmod.models.sharding import is_partitioned

            self._sharded = any(is_partitioned(p) for p in base.parameters())
        if not self._sharded:
            return all_stored
        import torch.distributed as dist

        if self._group is None:  # every rank reaches its first forward together (sharded forwards are collectives)
            # the default group when it is gloo already (CPU); beside NCCL a gloo group of our own, closed at teardown
            self._group = "default" if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        missing = torch.tensor([0 if all_stored else 1])
        dist.all_reduce(missing, op=dist.ReduceOp.MAX, group=None if self._group == "default" else self._group)
        return int(missing.item()) == 0

    def close(self) -> None:
        """Release the gloo group (a process group left to interpreter exit can abort it: its threads are still joinable)."""
        import torch.distributed as dist

        group, self._group = self._group, None
        if group not in (None, "default") and dist.is_initialized():
            dist.destroy_process_group(group)

    def inputs(self, base: nn.Module, inputs: dict[str, torch.Tensor], image_keys: Sequence[Sequence[str]] | None) -> dict[str, Any]:
        """The model inputs with the images' features in place of their pixels (unchanged when the batch shows no image)."""
        if image_keys is None or "pixel_values" not in inputs:
            return inputs
        keys = [key for row in image_keys for key in row]
        found = {key: self.store.get(key) for key in dict.fromkeys(keys)}
        if self._agree(base, all(entry is not None for entry in found.values())):
            entries = [found[key][0] for key in keys]
            features_layout = batch_layout({entry[1] for entry in found.values()})
        else:
            with torch.no_grad():
                output = encode(base, inputs)
            self.store.stats.encoded += len(keys)
            counts = (inputs["input_ids"] == image_token_id(base.config)).sum(1).tolist()
            cut = split_per_image(output, counts, [len(row) for row in image_keys])
            if cut is None:  # e.g. several tiled images in one row: used as encoded, not stored
                if not self._uncut_logged:
                    log.info(
                        "vision cache: batches with several tiled images per row are encoded each time (their features cannot be cut per image)"
                    )
                    self._uncut_logged = True
                return {**without_pixels(inputs), "mm_encoder_outputs": {"image": output}}
            features_layout = layout(output)
            for key, entry in dict(zip(keys, cut)).items():
                if found[key] is None:
                    self.store.put(key, entry, features_layout)
            entries = cut
        device = inputs["input_ids"].device
        moved = [{name: t.to(device, non_blocking=True) for name, t in entry.items()} for entry in entries]
        return {**without_pixels(inputs), "mm_encoder_outputs": {"image": assemble(moved, features_layout)}}

    def end_stage(self, stage: Any) -> None:
        """One line per stage (rank 0): what this stage read, encoded and wrote; then counts restart and the group closes."""
        from lightning.pytorch.utilities import rank_zero_info

        rank_zero_info(f"[{getattr(stage, 'value', stage)}] {self.report()}")  # Lightning passes its TrainerFn
        self.store.stats.reset()
        self.close()

    def report(self) -> str:
        """This process's reads and writes, and what the namespace folder holds (images, bytes)."""
        files = list(Path(self.store.folder).glob("*/*.safetensors"))
        size = sum(f.stat().st_size for f in files)
        return f"{self.store.stats.line(self.store.folder)}; the folder holds {len(files)} images, {size / 2**20:.1f} MiB"


def batch_layout(layouts: set[str]) -> str:
    """The one layout a batch's entries are read in. A flat `tensor` entry (written before tiles were recorded) reads
    like any `blocks:<n>` one; anything else mixed means entries of two different models in one namespace."""
    blocks = {item for item in layouts if item.startswith("blocks:")}
    if len(blocks) > 1 or (len(layouts) > 1 and layouts - blocks != {"tensor"}):
        raise DamagedCacheEntry(f"vision cache entries of one batch disagree on their layout ({sorted(layouts)}); delete the cache folder")
    return blocks.pop() if blocks else layouts.pop()

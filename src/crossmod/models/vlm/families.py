"""What differs between image-text-to-text VLM families, as data: one row per family, no branches elsewhere.

Everything else is shared: each family's own processor renders the chat (`apply_chat_template`) and
returns the tensors its model's forward takes, and those are passed on whole. A row says only what
cannot be asked of the checkpoint itself:
- where the language model, the vision encoder and the projector sit in the module tree (LoRA presets
  are built from these, so `qv` never adapts a vision tower's q/v projections; `freeze_vision=false`
  trains the encoder and the projector);
- which placeholder the chat template writes for an image (checked once per template, so a template
  that silently drops images is an error, not a text-only model);
- what precedes the answer letter in the model's first generated token (`" a"` for Idefics3/SmolVLM,
  whose generation prompt ends in "Assistant:"), so the verbalizer reads the token generation picks;
- whether the image processor's size is a pixel-count range (Qwen's dynamic resolution), which
  `min_pixels`/`max_pixels` bound;

The family is looked up by the checkpoint's `config.json` `model_type` (read as JSON, no code runs).
A family missing here can be named in the model config: `model.fusion.family={…the fields below…}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LANGUAGE_QV = ("q_proj", "v_proj")
LANGUAGE_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SIGLIP_LINEAR = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")


@dataclass(frozen=True)
class VLMFamily:
    """One family's module layout and chat quirks (see the module docstring for why each field exists)."""

    name: str
    model_types: tuple[str, ...]
    language_model: str  # regex of the language model's module path
    vision_tower: str  # regex of the vision encoder's module path
    vision_layers: str  # regex of its transformer blocks' list, whose linear layers `vision_lora` adapts
    vision_linear: tuple[str, ...]  # names of those linear layers
    projector: str | None  # regex of the image→text projector when it sits outside the vision encoder
    image_placeholder: str  # what the chat template writes where an image goes
    answer_prefix: str = ""  # text before the answer letter in the first generated token
    pixel_bounds: bool = False  # True: the image processor's size is a pixel-count range (min_pixels/max_pixels)

    def targets(self, preset: str, vision_lora: bool = False) -> str:
        """The LoRA target regex of a preset (`qv`, `all_linear`) or a regex given as is, plus the vision encoder's blocks."""
        layers = {"qv": LANGUAGE_QV, "all_linear": LANGUAGE_LINEAR}.get(preset)
        pattern = preset if layers is None else rf"{self.language_model}\..*\.({'|'.join(layers)})"
        if vision_lora:
            pattern = rf"(?:{pattern})|(?:{self.vision_layers}\.\d+\..*\.({'|'.join(self.vision_linear)}))"
        return pattern

    def vision_modules(self) -> list[str]:
        """Module names of the vision encoder and the projector (the family's patterns are plain dotted paths)."""
        return [re.sub(r"\\(.)", r"\1", p) for p in (self.vision_tower, self.projector) if p]

    def is_vision(self, parameter: str) -> bool:
        """Whether a parameter belongs to the vision encoder or the projector (what `freeze_vision=false` trains)."""
        roots = "|".join(p for p in (self.vision_tower, self.projector) if p)
        return re.match(rf"(?:{roots})\.", parameter) is not None


FAMILIES: tuple[VLMFamily, ...] = (
    VLMFamily(
        name="qwen2_vl",
        model_types=("qwen2_vl", "qwen2_5_vl"),
        language_model=r"model\.language_model",
        vision_tower=r"model\.visual",  # the merger sits inside
        vision_layers=r"model\.visual\.blocks",
        vision_linear=("qkv", "proj", "fc1", "fc2", "gate_proj", "up_proj", "down_proj"),
        projector=None,
        image_placeholder="<|vision_start|><|image_pad|><|vision_end|>",
        pixel_bounds=True,
    ),
    VLMFamily(
        name="qwen3_vl",
        model_types=("qwen3_vl", "qwen3_vl_moe"),
        language_model=r"model\.language_model",
        vision_tower=r"model\.visual",  # the mergers (deepstack too) sit inside
        vision_layers=r"model\.visual\.blocks",
        vision_linear=("qkv", "proj", "linear_fc1", "linear_fc2"),
        projector=None,
        image_placeholder="<|vision_start|><|image_pad|><|vision_end|>",
        pixel_bounds=True,
    ),
    VLMFamily(
        name="llava_onevision",
        model_types=("llava_onevision",),
        language_model=r"model\.language_model",
        vision_tower=r"model\.vision_tower",
        vision_layers=r"model\.vision_tower\.encoder\.layers",
        vision_linear=SIGLIP_LINEAR,
        projector=r"model\.multi_modal_projector",
        image_placeholder="<image>",
    ),
    VLMFamily(
        name="internvl",
        model_types=("internvl",),
        language_model=r"model\.language_model",
        vision_tower=r"model\.vision_tower",
        vision_layers=r"model\.vision_tower\.encoder\.layer",
        vision_linear=("q_proj", "k_proj", "v_proj", "projection_layer", "fc1", "fc2"),
        projector=r"model\.multi_modal_projector",
        image_placeholder="<IMG_CONTEXT>",
    ),
    VLMFamily(
        name="idefics3",
        model_types=("idefics3", "smolvlm"),
        language_model=r"model\.text_model",
        vision_tower=r"model\.vision_model",
        vision_layers=r"model\.vision_model\.encoder\.layers",
        vision_linear=SIGLIP_LINEAR,
        projector=r"model\.connector",
        image_placeholder="<image>",
        answer_prefix=" ",
    ),
    VLMFamily(
        name="gemma3",
        model_types=("gemma3",),
        language_model=r"model\.language_model",
        vision_tower=r"model\.vision_tower",
        vision_layers=r"model\.vision_tower\.encoder\.layers",
        vision_linear=SIGLIP_LINEAR,
        projector=r"model\.multi_modal_projector",
        image_placeholder="<start_of_image>",
    ),
)


def family_named(name: str) -> VLMFamily:
    for family in FAMILIES:
        if family.name == name:
            return family
    raise ValueError(f"unknown VLM family {name!r}; known: {[f.name for f in FAMILIES]}")


def model_type(name_or_path: str) -> str:
    """`model_type` from a checkpoint's config.json: a local folder's file, or the hub cache's copy."""
    folder = Path(name_or_path)
    if folder.is_dir():
        config_file = folder / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"{folder} has no config.json: not a Transformers checkpoint folder")
    else:
        from transformers.utils import cached_file

        config_file = Path(cached_file(name_or_path, "config.json"))
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except ValueError as error:  # not UTF-8 or not JSON
        raise ValueError(f"{config_file}: not readable JSON ({error}); a Transformers checkpoint's config.json is a JSON object") from None
    kind = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(kind, str) or not kind:
        found = f"a JSON {type(config).__name__}" if not isinstance(config, dict) else f"model_type {kind!r}"
        raise ValueError(
            f"{config_file}: {found}, where a Transformers checkpoint's config.json is an object with a model_type string; "
            "point model.name_or_path at a checkpoint folder"
        )
    return kind


def family_for(name_or_path: str, family: str | Mapping[str, Any] | None = None) -> VLMFamily:
    """The family row of a checkpoint: `family` when given (a name, or a row's fields), else by its model_type."""
    if isinstance(family, Mapping):
        fields = dict(family)
        for key in ("model_types", "vision_linear"):
            fields[key] = tuple(fields.get(key, ()))
        fields.setdefault("projector", None)
        row = VLMFamily(**fields)
        for pattern in (row.language_model, row.vision_tower, row.vision_layers, row.projector):
            if pattern is not None:
                re.compile(pattern)
        return row
    if family not in (None, "auto"):
        return family_named(str(family))
    kind = model_type(name_or_path)
    for row in FAMILIES:
        if kind in row.model_types:
            return row
    raise ValueError(
        f"{name_or_path}: model_type {kind!r} is not a known VLM family ({', '.join(f.name for f in FAMILIES)}). "
        "Name one with model.fusion.family=<name>, or describe it with model.fusion.family={name: …, model_types: […], "
        "language_model: …, vision_tower: …, vision_layers: …, vision_linear: […], projector: …, image_placeholder: …} (src/crossmod/models/vlm/families.py)"
    )

"""Activation memory of crossmod's Qwen-VL LoRA classifier, per meme: measured on CPU, and the formula that
scales the measurement to the published model sizes.

What is measured. Between forward and backward a training step holds the tensors autograd saved for
backward, plus (under activation checkpointing) the arguments each checkpointed layer keeps for its
recomputation. Both are seen here, with parameters and buffers left out (they are model states):
`torch.autograd.graph.saved_tensors_hooks` sees every tensor saved outside a checkpointed region, and a
forward pre-hook on every checkpointed layer sees the arguments it is called with. Only what is still alive
when backward starts counts, in bytes of distinct storages: a checkpointed layer whose region saved nothing
for backward (a frozen vision block whose input needs no grad) drops its arguments as soon as it returns,
so they were seen but are not held. For a fixed dtype and attention algorithm these bytes do not depend on
the hardware, so a CPU measures them exactly; a GPU's allocator rounding, its workspace and the transients
of backward are not in them (docs/performance.md).

The model is crossmod's own `crossmod.models.vlm.classifier.VLMClassifier` (LoRA presets, dropout and checkpointing
as training uses them; under checkpointing no input embedding is hooked to require grad) on a small random
Qwen2-VL / Qwen2.5-VL saved to a folder, with the culture heads of `crossmod.models.heads.HeadLayers`. Two dtype
regimes, as the strategies run:
- `mixed`: bf16 weights, PEFT's fp32 LoRA weights and fp32 heads, bf16 autocast (Lightning `bf16-mixed`:
  one GPU, strategy=ddp);
- `bf16`: every weight bf16, the heads' included, no autocast (DeepSpeed's engine casts the module's
  parameters when `bf16.enabled`; the heads cast the backbone's fp32 features to their own dtype).
"""

from __future__ import annotations

import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REGIMES = ("mixed", "bf16")
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.05}  # configs/model/vlm.yaml and experiment=qwen_lora_cv
HEADS = {culture: {"kind": "binary"} for culture in ("US", "DE", "MX", "IN", "CN")}  # configs/data/multi3hate.yaml
PATCH, MERGE, TEMPORAL = 14, 2, 2  # Qwen2-VL and Qwen2.5-VL vision: 14 px patches, 2×2 merged into one token


@dataclass(frozen=True)
class Dims:
    """The sizes of a Qwen2-VL / Qwen2.5-VL config: the language model's, which the formula reads, and the
    vision tower's, kept in the record because the validation sizes differ in them too (the frozen tower holds
    nothing from forward to backward)."""

    family: str  # qwen2_vl | qwen2_5_vl
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vision_width: int  # embed_dim (Qwen2-VL) / hidden_size (Qwen2.5-VL) of the vision blocks
    vision_depth: int
    vision_heads: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, config: Any) -> Dims:
        text, vision = config.get_text_config(), config.vision_config
        width = vision.embed_dim if config.model_type == "qwen2_vl" else vision.hidden_size
        return cls(
            config.model_type,
            text.hidden_size,
            text.intermediate_size,
            text.num_hidden_layers,
            text.num_attention_heads,
            text.num_key_value_heads,
            width,
            vision.depth,
            vision.num_heads,
        )


def image_patches(image_size: int = 512) -> int:
    """Vision patches of one square meme after the Qwen-VL processor's resize (multiples of 28 px)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    height, width = smart_resize(image_size, image_size, factor=PATCH * MERGE)
    return (height // PATCH) * (width // PATCH)


def sequence_tokens(patches: int, text_tokens: int) -> int:
    """Language-model tokens of one meme: merged image tokens, <|vision_start|> and <|vision_end|>, the text."""
    return patches // (MERGE * MERGE) + 2 + text_tokens


def decoder_layer_bytes(dims: Dims, tokens: int, regime: str, lora_r: int = LORA["r"]) -> int:
    """What one decoder layer (input requiring grad) saves for backward, LoRA on q and v with dropout > 0.

    Per token: two RMSNorms (fp32 copy of the input, 4h, and the inverse rms, 4 B); attention saves q and its
    output (2 B × heads·head_dim each), k and v (2 B × kv_heads·head_dim each) and the log-sum-exp (4 B per head);
    the SwiGLU MLP saves gate, SiLU(gate) and up (2 B × intermediate each); the frozen projections save
    nothing. Each LoRA target saves its dropout mask (h elements in the adapter's dtype), lora_A's input
    (bf16: 2h) and lora_B's input (2r). Under `mixed` the adapter is fp32 (mask 4h) and autocast keeps bf16
    copies of the LoRA weights once per layer.
    """
    h, d = dims.hidden, dims.head_dim
    mask = 4 * h if regime == "mixed" else 2 * h
    lora_per_target = mask + 2 * h + 2 * lora_r
    per_token = 2 * (4 * h + 4) + 2 * 2 * dims.heads * d + 2 * 2 * dims.kv_heads * d + 4 * dims.heads + 3 * 2 * dims.intermediate
    per_token += 2 * lora_per_target
    weight_copies = 2 * lora_r * ((h + dims.heads * d) + (h + dims.kv_heads * d)) if regime == "mixed" else 0
    return tokens * per_token + weight_copies


def head_bytes(dims: Dims, regime: str, heads: int = len(HEADS)) -> int:
    """The culture heads' saved input and the two int64 indices that pick the last token.

    The heads cast the backbone's fp32 features to their weight's dtype. `mixed`: fp32 heads, so the features
    stay fp32 and autocast saves their bf16 copy and the weight's. `bf16`: DeepSpeed's bf16 heads save the
    features' bf16 cast (before the heads took their own dtype they saved the fp32 features, 4h).
    """
    features = 2 * dims.hidden + 2 * heads * dims.hidden if regime == "mixed" else 2 * dims.hidden
    return features + 2 * 8


def held_bytes(dims: Dims, tokens: int, regime: str, checkpointing: bool) -> int:
    """Bytes one meme holds from forward to backward (the formula; `measure_held_bytes` counts them). The image
    enters only through its tokens: the frozen vision tower holds nothing, with or without checkpointing."""
    h, rotary = dims.hidden, 2 * tokens * dims.head_dim * 2  # the language model's M-RoPE cos and sin, bf16
    final_norm = tokens * (4 * h + 4)
    if checkpointing:
        # Each decoder layer keeps its bf16 input for the recomputation, the first one's included: the LoRA
        # weights inside its region require grad, so the region saves and its checkpoint stays alive although
        # its input does not require grad. Nothing else of the embeddings is held: the frozen vision tower's
        # output needs no grad (no input embedding is hooked to require it), so its checkpointed blocks save
        # nothing and drop their inputs, the merger saves nothing, and scattering the image tokens into the
        # text saves no mask.
        language = dims.layers * tokens * 2 * h + rotary + final_norm
        return language + head_bytes(dims, regime)
    # The first layer's input needs no grad (the tower is frozen and no embedding hook is set): its input
    # norm and its LoRA dropout masks are not saved, nor (under autocast) the bf16 copies of lora_A's weights.
    first_layer_unsaved = tokens * ((4 * h + 4) + 2 * (4 * h if regime == "mixed" else 2 * h))
    first_layer_unsaved += 2 * 2 * LORA["r"] * h if regime == "mixed" else 0
    layers = dims.layers * decoder_layer_bytes(dims, tokens, regime) - first_layer_unsaved
    return layers + rotary + final_norm + head_bytes(dims, regime)


def peak_bytes(dims: Dims, tokens: int, regime: str, checkpointing: bool, batch: int) -> dict[str, int]:
    """Activation bytes of a micro-batch: what is held, plus one decoder layer's saved set as the allowance for
    backward's working set (under checkpointing: the layer being recomputed). Per-batch constants are counted
    once per meme, which overstates them by a few kB."""
    held = batch * held_bytes(dims, tokens, regime, checkpointing)
    working = batch * decoder_layer_bytes(dims, tokens, regime)
    return {"held": held, "working": working, "total": held + working}


# ---- measurement on CPU ------------------------------------------------------------------------------


def small_config(family: str, hidden: int, layers: int, heads: int, kv_heads: int, vision_width: int, vision_depth: int):
    """A random-initialisable Qwen2-VL / Qwen2.5-VL config of the given sizes (intermediate = 2.75 × hidden)."""
    from transformers import AutoConfig

    head_dim = hidden // heads
    half = head_dim // 2
    temporal = half // 4
    text = dict(
        vocab_size=1024,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e6,
            "mrope_section": [temporal, (half - temporal) // 2, half - temporal - (half - temporal) // 2],
        },
    )
    vision_heads = vision_width // 32
    if family == "qwen2_vl":
        vision = dict(depth=vision_depth, embed_dim=vision_width, hidden_size=hidden, num_heads=vision_heads, mlp_ratio=4)
    else:
        vision = dict(
            depth=vision_depth,
            hidden_size=vision_width,
            out_hidden_size=hidden,
            num_heads=vision_heads,
            intermediate_size=vision_width * 3,
            fullatt_block_indexes=[vision_depth - 1],
            window_size=112,
        )
    ids = dict(image_token_id=1023, video_token_id=1022, vision_start_token_id=1021, vision_end_token_id=1020)
    return AutoConfig.for_model(family, text_config=text, vision_config=vision, **ids)


def meme_batch(config: Any, grid: int, text_tokens: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """One meme as the processor hands it over: `grid`×`grid` patches, their merged tokens inside the text."""
    generator = torch.Generator().manual_seed(seed)
    image_tokens = (grid // MERGE) ** 2
    ids = torch.randint(2, 1000, (1, text_tokens + image_tokens + 2), generator=generator)
    start = text_tokens // 2
    ids[0, start] = config.vision_start_token_id
    ids[0, start + 1 : start + 1 + image_tokens] = config.image_token_id
    ids[0, start + 1 + image_tokens] = config.vision_end_token_id
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == config.image_token_id).int(),
        "pixel_values": torch.randn(grid * grid, 3 * TEMPORAL * PATCH * PATCH, generator=generator),
        "image_grid_thw": torch.tensor([[1, grid, grid]]),
    }


def save_random_model(config: Any, directory: Path, seed: int = 0) -> Path:
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    AutoModelForImageTextToText.from_config(config).save_pretrained(directory)
    return directory


def measure_held_bytes(folder: Path, batch: dict[str, torch.Tensor], regime: str, checkpointing: bool) -> int:
    """Count (not estimate) the bytes one training step holds from forward to backward, on CPU."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from crossmod.data.heads import parse_heads
    from crossmod.models.heads import HeadLayers
    from crossmod.models.vlm.classifier import VLMClassifier

    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    torch.manual_seed(0)
    backbone = VLMClassifier(
        str(folder), HEADS, lora=dict(LORA), gradient_checkpointing=checkpointing, dtype="bfloat16", attn_implementation="sdpa"
    )
    heads = HeadLayers(backbone.output_dim, parse_heads(HEADS))
    if regime == "bf16":  # as DeepSpeed's engine casts the module (heads included): parameters only, fp32 buffers kept
        for parameter in (*backbone.parameters(), *heads.parameters()):
            parameter.data = parameter.data.to(torch.bfloat16)
    backbone.train()
    seen: list[weakref.ref[torch.Tensor]] = []  # weak: seeing a tensor must not keep it alive

    def see(tensor: torch.Tensor) -> None:
        seen.append(weakref.ref(tensor))

    def kept_by_checkpoint(module, args, kwargs) -> None:
        if module.gradient_checkpointing and module.training:
            for value in (*args, *kwargs.values()):
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(item, torch.Tensor):
                        see(item)

    hooks = [
        m.register_forward_pre_hook(kept_by_checkpoint, with_kwargs=True)
        for m in backbone.modules()
        if isinstance(m, GradientCheckpointingLayer)
    ]
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: (see(t), t)[1], lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=regime == "mixed"):
                logits = heads(backbone(batch))
        held = alive_storage_bytes(seen, excluded=(backbone, heads))
        torch.stack([value.float().sum() for value in logits.values()]).sum().backward()
    finally:
        for hook in hooks:
            hook.remove()
    return held


def alive_storage_bytes(tensors: list[weakref.ref[torch.Tensor]], excluded: tuple[torch.nn.Module, ...]) -> int:
    """Bytes of the distinct storages behind the tensors still alive, the modules' parameters and buffers left
    out. Counted while all of them are alive at once, so no two distinct storages share an address."""
    parameters = {t.untyped_storage().data_ptr() for m in excluded for t in (*m.parameters(), *m.buffers())}
    held: dict[int, int] = {}
    for ref in tensors:
        tensor = ref()
        if tensor is not None:
            storage = tensor.untyped_storage()
            if storage.nbytes() and storage.data_ptr() not in parameters:
                held.setdefault(storage.data_ptr(), storage.nbytes())
    return sum(held.values())


@dataclass(frozen=True)
class ValidationSize:
    name: str
    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    vision_width: int
    vision_depth: int
    grid: int
    text_tokens: int


# Two sizes that differ in every dimension the formula reads (and a Qwen2.5-VL for its vision tower).
VALIDATION = (
    ValidationSize("A", "qwen2_vl", 128, 2, 4, 2, 64, 2, 36, 192),
    ValidationSize("B", "qwen2_vl", 256, 3, 8, 2, 96, 3, 28, 120),
    ValidationSize("B-2.5", "qwen2_5_vl", 256, 3, 8, 2, 96, 3, 28, 120),
)
SMOKE_VALIDATION = (
    ValidationSize("A", "qwen2_vl", 64, 2, 2, 1, 32, 1, 8, 16),
    ValidationSize("B", "qwen2_vl", 128, 3, 4, 2, 64, 2, 12, 24),
)


def validate(sizes: tuple[ValidationSize, ...] = VALIDATION, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Measure every size × regime × checkpointing and put the formula's prediction beside it."""
    rows = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for size in sizes:
            config = small_config(size.family, size.hidden, size.layers, size.heads, size.kv_heads, size.vision_width, size.vision_depth)
            folder = save_random_model(config, Path(tmp) / size.name)
            batch = meme_batch(config, size.grid, size.text_tokens)
            dims = Dims.from_config(config)
            tokens, patches = batch["input_ids"].shape[1], size.grid * size.grid
            for regime in REGIMES:
                for checkpointing in (False, True):
                    measured = measure_held_bytes(folder, batch, regime, checkpointing)
                    predicted = held_bytes(dims, tokens, regime, checkpointing)
                    rows.append(
                        {
                            "size": size.name,
                            "family": size.family,
                            "dims": dims.__dict__,
                            "tokens": tokens,
                            "patches": patches,
                            "regime": regime,
                            "checkpointing": checkpointing,
                            "measured_bytes": measured,
                            "formula_bytes": predicted,
                            "formula_over_measured": predicted / measured,
                        }
                    )
    return rows

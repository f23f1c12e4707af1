"""Does `count_flops` agree with torch.utils.flop_counter.FlopCounterMode on a real training step?

A small random Qwen2-VL and Qwen2.5-VL (three decoder layers, hidden 256, a two-block vision tower,
a 168 px image: 144 patches, 36 image tokens, and for 2.5 one full and one windowed block whose last
window row and column are cut short) is saved and loaded through crossmod's `VLMClassifier` (frozen base,
PEFT LoRA on q,v with r=8 as `model=vlm` configures it), its head layer on top; FlopCounterMode counts
one forward and one backward of the loss, with eager attention and with SDPA.

What FlopCounterMode counts: every aten matmul (mm, addmm, bmm, baddbmm) as 2·m·k·n, convolutions as
2·outputs·(inputs per output), and SDPA's fused kernels by formula: forward as the two matmuls QKᵀ and ·V
over the whole square, backward as five (QKᵀ recomputed, dP, dV, dQ, dK) whatever needs a gradient. Eager
attention is plain matmuls, so it meets the model-FLOP count exactly; SDPA meets model FLOPs plus
`attention_kernel_extra`, the fused kernel's extra backward work, which is reported as such.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

SMALL_TEXT = dict(
    vocab_size=1024,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    bos_token_id=None,
    eos_token_id=None,
)
SMALL_IMAGE = 168
SMALL_TEXT_TOKENS = 40  # every non-image token: prompt, vision start/end, caption
HEADS = {culture: {"kind": "binary"} for culture in ("US", "DE", "MX", "IN", "CN")}
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.05}
IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END = 1000, 1001, 1002, 1003


def count_cpu_fused_attention() -> None:
    """torch < 2.15's FlopCounterMode has no formula for SDPA's CPU kernel (`_scaled_dot_product_flash_attention_for_cpu`),
    so it counted no attention FLOPs on CPU; 2.15 counts it with the same formulas as the GPU fused kernels. Register
    torch's own formulas for it where they are missing, so both releases count the same step alike."""
    import torch.utils.flop_counter as flop_counter

    aten = torch.ops.aten
    missing = {
        aten._scaled_dot_product_flash_attention_for_cpu: flop_counter.sdpa_flop,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_counter.sdpa_backward_flop,
    }
    for op, formula in missing.items():
        if op not in flop_counter.flop_registry and op.default not in flop_counter.flop_registry:
            flop_counter.register_flop_formula(op, get_raw=True)(formula)  # already shape-wrapped


def small_config(model_type: str) -> Any:
    """A small Qwen2-VL (`qwen2_vl`) or Qwen2.5-VL (`qwen2_5_vl`) with the released models' token layout."""
    from transformers import AutoConfig

    # head_dim 64: its 32 rotary frequencies split over (time, height, width) as Qwen's [16, 24, 24] splits 64
    text = {**SMALL_TEXT, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 12, 12]}}
    vision = dict(depth=2, num_heads=4, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    if model_type == "qwen2_vl":
        vision.update(embed_dim=128, hidden_size=SMALL_TEXT["hidden_size"], mlp_ratio=4)
    else:
        vision.update(
            hidden_size=128, out_hidden_size=SMALL_TEXT["hidden_size"], intermediate_size=320, window_size=112, fullatt_block_indexes=[1]
        )
    return AutoConfig.for_model(
        model_type,
        text_config=text,
        vision_config=vision,
        image_token_id=IMAGE_PAD,
        video_token_id=VIDEO_PAD,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
    )


def meme_inputs(config: Any, image_size: int = SMALL_IMAGE, text_tokens: int = SMALL_TEXT_TOKENS, seed: int = 0) -> dict[str, torch.Tensor]:
    """One meme as the processor hands it over: patches, grid, ids with the image placeholders, masks, labels.

    The config's own special token ids; the words are random ids below 900 (any vocabulary has them).
    """
    from bench.vlm_flops import image_grid

    height, width = image_grid(config, image_size)
    vision = config.vision_config
    grid_h, grid_w = height // vision.patch_size, width // vision.patch_size
    image_tokens = grid_h * grid_w // vision.spatial_merge_size**2
    generator = torch.Generator().manual_seed(seed)
    words = torch.randint(0, 900, (text_tokens - 2,), generator=generator).tolist()
    image = [config.vision_start_token_id] + [config.image_token_id] * image_tokens + [config.vision_end_token_id]
    input_ids = torch.tensor([words[:5] + image + words[5:]])
    patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "mm_token_type_ids": (input_ids == config.image_token_id).int(),
        "pixel_values": torch.randn(grid_h * grid_w, patch, generator=generator),
        "image_grid_thw": torch.tensor([[1, grid_h, grid_w]]),
        "option_ids": torch.tensor([[17, 18]]),
        "labels": torch.zeros(1),
    }


def counted_step(folder: Path, case: dict[str, Any], batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """FlopCounterMode's (forward, backward) FLOPs of one step of crossmod's classifier on `batch`."""
    from torch.utils.flop_counter import FlopCounterMode

    count_cpu_fused_attention()

    from crossmod.data.heads import parse_heads
    from crossmod.models.heads import HeadLayers
    from crossmod.models.vlm.classifier import VLMClassifier

    torch.manual_seed(0)
    classifier = VLMClassifier(
        str(folder),
        HEADS,
        mode=case["readout"],
        lora=LORA,
        target_modules=case["lora"],
        gradient_checkpointing=case["gradient_checkpointing"],
        dtype="float32",
        attn_implementation=case["attention"],
    )
    head_layers = HeadLayers(classifier.output_dim, parse_heads(HEADS)) if case["readout"] == "head" else None
    classifier.train()
    with FlopCounterMode(display=False) as forward:
        output = classifier(batch)
        logits = head_layers(output) if head_layers is not None else output
        loss = torch.stack([torch.nn.functional.binary_cross_entropy_with_logits(v, batch["labels"]) for v in logits.values()]).mean()
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    return forward.get_total_flops(), backward.get_total_flops()


CASES = [
    {"model_type": "qwen2_vl", "attention": "eager", "readout": "head", "lora": "qv", "gradient_checkpointing": False},
    {"model_type": "qwen2_vl", "attention": "sdpa", "readout": "head", "lora": "qv", "gradient_checkpointing": False},
    {"model_type": "qwen2_5_vl", "attention": "eager", "readout": "head", "lora": "qv", "gradient_checkpointing": False},
    {"model_type": "qwen2_5_vl", "attention": "sdpa", "readout": "head", "lora": "qv", "gradient_checkpointing": False},
    {"model_type": "qwen2_vl", "attention": "eager", "readout": "verbalizer", "lora": "qv", "gradient_checkpointing": False},
    {"model_type": "qwen2_vl", "attention": "eager", "readout": "head", "lora": "qv", "gradient_checkpointing": True},
    {"model_type": "qwen2_5_vl", "attention": "sdpa", "readout": "head", "lora": "all_linear", "gradient_checkpointing": True},
]


def case_label(case: dict[str, Any]) -> str:
    checkpointing = ", checkpointing" if case["gradient_checkpointing"] else ""
    return f"{case['model_type']} {case['attention']} {case['readout']} LoRA {case['lora']}{checkpointing}"


def agreement_rows(cases: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Counted vs predicted FLOPs, forward and forward+backward, per case (model type, attention, readout,
    LoRA preset, gradient checkpointing). Forward+backward predicted = model FLOPs, plus the fused kernel's
    extra under SDPA, plus the recomputation under gradient checkpointing: what the counter sees."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # counts do not depend on threads; two threads on two shared cores made steps 25× slower
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return [row for case in cases or CASES for row in _case_rows(Path(tmp), case)]
    finally:
        torch.set_num_threads(threads)


def _case_rows(tmp: Path, case: dict[str, Any]) -> list[dict[str, Any]]:
    from transformers import AutoModelForImageTextToText

    from bench.vlm_flops import count_flops

    model_type = case["model_type"]
    config = small_config(model_type)
    folder = tmp / model_type
    if not folder.exists():  # one saved model per type, shared by its cases
        torch.manual_seed(0)
        AutoModelForImageTextToText.from_config(config).save_pretrained(folder)
    predicted = count_flops(
        config, SMALL_IMAGE, SMALL_TEXT_TOKENS, case["lora"], LORA["r"], case["readout"], len(HEADS), case["gradient_checkpointing"]
    )
    forward, backward = counted_step(folder, case, meme_inputs(config))
    extra = predicted.attention_kernel_extra if case["attention"] == "sdpa" else 0
    model = f"{model_type}: {SMALL_TEXT['num_hidden_layers']} layers, hidden {SMALL_TEXT['hidden_size']}, {SMALL_IMAGE} px, {predicted.sequence} tokens"
    rows = []
    for name, counted, expected, parts in (
        ("forward", forward, predicted.forward, (0, 0)),
        ("forward+backward", forward + backward, predicted.train + extra + predicted.recompute, (extra, predicted.recompute)),
    ):
        rows.append(
            {
                "model": model,
                "case": case_label(case),
                **case,
                "pass": name,
                "counted": counted,
                "predicted": expected,
                "of_which_fused_attention_extra": parts[0],
                "of_which_recompute": parts[1],
                "relative_difference": (counted - expected) / expected,
            }
        )
    return rows

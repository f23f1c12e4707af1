"""GPU memory plan for Qwen2-VL / Qwen2.5-VL LoRA training (7B, 72B) on 1, 8 and 16 GPUs of 80 GB.

    python bench/memory_plan.py [--text-tokens 192] [--smoke]

No GPU is used or measured. Per GPU, for every model × GPU count × strategy × activation checkpointing:
- model states from DeepSpeed's own estimators (`estimate_zero2/3_model_states_mem_needs_all_cold`), which
  assume every parameter trains with Adam;
- model states derived for LoRA, where only the adapters (q, v, r 8) and the culture heads train: the frozen
  weights are one bf16 copy (replicated under DDP and ZeRO-2, sharded under ZeRO-3, on the host under
  offload), the trainable ones carry DeepSpeed's per-parameter bytes (or, under DDP's bf16-mixed, fp32
  weight, gradient and two Adam moments);
- activations of a micro-batch of 16 memes per GPU (`data.batch_size` is per process; DeepSpeed's
  `train_micro_batch_size_per_gpu` is set from it) from `bench.activation_memory`'s formula, which the CPU
  measurement of saved tensors validates on small random models.
Parameter counts come from the published configs (sources in PUBLISHED), counted on a model built on the
meta device. The table goes to stdout, bench/results/memory_plan.json and docs/performance.md (`bench.memory_plan_docs`).
"""

from __future__ import annotations

import io
import re
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/memory_plan.py` puts bench/ first on the path, not the checkout
    sys.path.insert(0, str(ROOT))

from bench.activation_memory import (  # noqa: E402
    LORA,
    REGIMES,
    Dims,
    decoder_layer_bytes,
    held_bytes,
    image_patches,
    peak_bytes,
    sequence_tokens,
)

GIB = 2**30  # DeepSpeed's estimators print GB = 2**30 bytes; so does this plan
CAPACITY_GIB = 80.0
HEADROOM_GIB = 8.0  # CUDA context, NCCL and DeepSpeed buffers, allocator fragmentation (docs/performance.md)
GPUS_PER_NODE = 8
BATCH_PER_GPU = 16  # experiment=qwen_lora_cv data.batch_size (per process)
HEADS = 5  # Multi3Hate's culture heads (US, DE, MX, IN, CN): one Linear(hidden, 5)
ADAM_BYTES_FP32 = 16  # DDP bf16-mixed: fp32 weight, gradient, exp_avg, exp_avg_sq
DEEPSPEED_TRAINABLE_BYTES = 18  # DeepSpeed's count: 16-bit grad 2 + fp32 grad 4 + fp32 weight 4 + Adam 8


@dataclass(frozen=True)
class PublishedModel:
    name: str
    family: str
    text: dict[str, int]
    vision: dict[str, Any]
    source: str


_TEXT_7B = dict(
    hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4, vocab_size=152064
)
_TEXT_72B = dict(
    hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8, vocab_size=152064
)
PUBLISHED = (
    PublishedModel(
        "Qwen/Qwen2-VL-7B-Instruct",
        "qwen2_vl",
        _TEXT_7B,
        dict(depth=32, embed_dim=1280, mlp_ratio=4, num_heads=16, hidden_size=3584),
        "config.json as in huggingface.co/Qwen/Qwen2-VL-7B-Instruct-GPTQ-Int8 (blame 34bb8e5) and "
        "unsloth/Qwen2-VL-7B-Instruct-bnb-4bit (_name_or_path Qwen/Qwen2-VL-7B-Instruct); the vision fields the file "
        "leaves out are Qwen2VLVisionConfig's defaults (32 blocks of 1280, MLP 5120, 16 heads, merger to 3584)",
    ),
    PublishedModel(
        "Qwen/Qwen2-VL-72B-Instruct",
        "qwen2_vl",
        _TEXT_72B,
        dict(depth=32, embed_dim=1280, mlp_ratio=4, num_heads=16, hidden_size=8192),
        "config.json as in huggingface.co/OPEA/Qwen2-VL-72B-Instruct-int4-sym-inc (e67cae7; _name_or_path "
        "Qwen2-VL-72B-Instruct): hidden 8192, intermediate 29568, 80 layers, 64/8 heads; vision_config hidden_size "
        "8192 as in lktinhtemp/Qwen2-VL-72B-Instruct-GPTQ-Int4_768x768",
    ),
    PublishedModel(
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "qwen2_5_vl",
        _TEXT_7B,
        dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584),
        "config.json as in huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct-AWQ (blame main; the vision tower is not "
        "quantised); vision fields it leaves out are Qwen2_5_VLVisionConfig's defaults (32 blocks, MLP 3420)",
    ),
    PublishedModel(
        "Qwen/Qwen2.5-VL-72B-Instruct",
        "qwen2_5_vl",
        _TEXT_72B,
        dict(depth=32, hidden_size=1280, intermediate_size=3456, num_heads=16, out_hidden_size=8192),
        "vision_config (intermediate 3456, out 8192) as in huggingface.co/Qwen/Qwen2.5-VL-72B-Instruct-AWQ (666b8f5), "
        "whose language model is Qwen2.5-72B's (hidden 8192, 80 layers, 64/8 heads); its intermediate_size 29696 is "
        "the AWQ copy's padding of Qwen2.5-72B's 29568, used here",
    ),
)

# (label, `strategy=` config, dtype regime of bench.activation_memory)
STRATEGIES = {
    "ddp": ("DDP", "strategy=ddp", "mixed"),
    "zero2": ("ZeRO-2", "strategy=deepspeed_zero2", "bf16"),
    "zero3": ("ZeRO-3", "strategy=deepspeed_zero3", "bf16"),
    "zero3_offload": ("ZeRO-3 + offload", "strategy=deepspeed_zero3_offload", "bf16"),
}


def build_config(model: PublishedModel):
    from transformers import AutoConfig

    return AutoConfig.for_model(model.family, text_config=dict(model.text), vision_config=dict(model.vision), tie_word_embeddings=False)


def persistence_threshold() -> int:
    """`stage3_param_persistence_threshold` of configs/strategy/deepspeed_zero3.yaml: smaller tensors stay whole."""
    from omegaconf import OmegaConf

    return int(
        OmegaConf.load(ROOT / "configs" / "strategy" / "deepspeed_zero3.yaml").config.zero_optimization.stage3_param_persistence_threshold
    )


def lora_parameters(model, family: str, r: int = LORA["r"], preset: str = "qv") -> int:
    """r·(in + out) per Linear that crossmod's LoRA preset adapts (`crossmod.models.vlm.families` regex, as PEFT matches it)."""
    from torch import nn

    from crossmod.models.vlm.families import FAMILIES

    pattern = next(row for row in FAMILIES if family in row.model_types).targets(preset)
    return sum(
        r * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and re.fullmatch(pattern, name)
    )


def count_parameters(model: PublishedModel) -> dict[str, int]:
    """Parameters of the published config, counted on a model built on the meta device (no weights)."""
    import torch
    from deepspeed.runtime.zero.stage3 import model_to_params
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        built = AutoModelForImageTextToText.from_config(build_config(model))
    hidden, threshold = model.text["hidden_size"], persistence_threshold()
    base = sum(p.numel() for p in built.parameters())  # no tied weights in these configs (tie_word_embeddings false)
    lora, heads = lora_parameters(built, model.family), HEADS * hidden + HEADS
    lora_persistent = LORA["r"] * hidden < threshold  # the largest LoRA tensor is r × hidden
    persistent = sum(p.numel() for p in built.parameters() if p.numel() < threshold) + heads + (lora if lora_persistent else 0)
    return {
        "base": base,
        "lora": lora,
        "heads": heads,
        "trainable": lora + heads,
        "total": base + lora + heads,
        "largest_layer": model_to_params(built)[1],  # DeepSpeed's rule: most parameters held directly by one module
        "persistent": persistent,
        "persistence_threshold": threshold,
    }


def topology(gpus: int) -> tuple[int, int]:
    """(GPUs per node, nodes): one node up to 8 GPUs, then nodes of 8."""
    return (gpus, 1) if gpus <= GPUS_PER_NODE else (GPUS_PER_NODE, gpus // GPUS_PER_NODE)


def deepspeed_estimates(total: int, largest_layer: int, gpus: int) -> dict[str, Any]:
    """DeepSpeed's estimators for the three DeepSpeed strategies (bytes), with the `_all_cold` printout they agree with."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs, estimate_zero3_model_states_mem_needs_all_cold
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs, estimate_zero2_model_states_mem_needs_all_cold

    per_node, nodes = topology(gpus)
    printed = io.StringIO()
    with redirect_stdout(printed):
        estimate_zero2_model_states_mem_needs_all_cold(total, num_gpus_per_node=per_node, num_nodes=nodes)
        estimate_zero3_model_states_mem_needs_all_cold(total, largest_layer, num_gpus_per_node=per_node, num_nodes=nodes)
    common = dict(num_gpus_per_node=per_node, num_nodes=nodes)
    cpu2, gpu2 = estimate_zero2_model_states_mem_needs(total, cpu_offload=False, **common)
    cpu3, gpu3, _ = estimate_zero3_model_states_mem_needs(
        total, largest_layer, cpu_offload=False, cpu_offload_params=False, zero_init=True, **common
    )
    cpu3o, gpu3o, _ = estimate_zero3_model_states_mem_needs(
        total, largest_layer, cpu_offload=True, cpu_offload_params=True, zero_init=True, **common
    )
    out = {
        "zero2": {"gpu": gpu2, "cpu": cpu2, "printed_options": "offload_optimizer=none"},
        "zero3": {"gpu": gpu3, "cpu": cpu3, "printed_options": "offload_param=none,offload_optimizer=none,zero_init=1"},
        "zero3_offload": {"gpu": gpu3o, "cpu": cpu3o, "printed_options": "offload_param=cpu,offload_optimizer=cpu,zero_init=1"},
        "printout": printed.getvalue(),
    }
    shown = printed_estimates(out["printout"])
    for name in ("zero2", "zero3", "zero3_offload"):
        expected = (f"{out[name]['cpu'] / GIB:.2f}", f"{out[name]['gpu'] / GIB:.2f}")
        if shown.get(out[name]["printed_options"]) != expected:
            raise RuntimeError(
                f"DeepSpeed's all_cold printout shows {shown.get(out[name]['printed_options'])} for {name}, computed {expected}"
            )
    return out


def printed_estimates(printout: str) -> dict[str, tuple[str, str]]:
    """The `_all_cold` printout's rows: options (offload devices as `cpu`/`none`) → (per CPU, per GPU) in GB."""
    rows = {}
    for cpu, gpu, options in re.findall(r"^\s*([\d.]+)GB \|\s*([\d.]+)GB \| (.+)$", printout, flags=re.M):
        rows[re.sub(r"OffloadDeviceEnum\.|\s", "", options)] = (cpu, gpu)
    return rows


def lora_model_states(counts: dict[str, int], strategy: str, gpus: int) -> dict[str, float]:
    """Model-state bytes per GPU (and host bytes per node) when only LoRA and the heads train (derived)."""
    frozen, trainable, persistent = counts["base"], counts["trainable"], counts["persistent"]
    _, nodes = topology(gpus)
    partitioned = counts["total"] - persistent  # ZeRO-3 shards only tensors above the persistence threshold
    working = 4 * counts["largest_layer"]  # DeepSpeed's ZeRO-3 term for the gathered parameters
    if strategy == "ddp":  # bf16 frozen copy; fp32 adapters with fp32 gradients and Adam moments, all replicated
        return {"gpu": 2 * frozen + ADAM_BYTES_FP32 * trainable, "host_per_node": 0}
    if strategy == "zero2":  # bf16 weights replicated; optimizer side of the trainable ones partitioned
        return {"gpu": 2 * (frozen + trainable) + DEEPSPEED_TRAINABLE_BYTES * trainable / gpus, "host_per_node": 0}
    if strategy == "zero3":
        return {"gpu": 2 * partitioned / gpus + 2 * persistent + DEEPSPEED_TRAINABLE_BYTES * trainable / gpus + working, "host_per_node": 0}
    if strategy == "zero3_offload":  # partitioned bf16 weights and the whole optimizer side on the host
        host = (2 * partitioned + DEEPSPEED_TRAINABLE_BYTES * trainable) / nodes
        return {"gpu": 2 * persistent + working, "host_per_node": host}
    raise ValueError(f"unknown strategy {strategy!r}; known: {list(STRATEGIES)}")


def plan(
    text_tokens: int = 192,
    image_size: int = 512,
    gpu_counts: tuple[int, ...] = (1, 8, 16),
    headroom_gib: float = HEADROOM_GIB,
    published: tuple[PublishedModel, ...] = PUBLISHED,
) -> dict[str, Any]:
    """Every model × GPUs × strategy × checkpointing row, with the inputs each figure came from."""
    patches = image_patches(image_size)
    tokens = sequence_tokens(patches, text_tokens)
    usable = CAPACITY_GIB - headroom_gib
    models, rows = [], []
    for model in published:
        counts = count_parameters(model)
        dims = Dims.from_config(build_config(model))
        per_meme = {
            regime: {
                "held_bytes": held_bytes(dims, tokens, regime, False),
                "held_checkpointing_bytes": held_bytes(dims, tokens, regime, True),
                "decoder_layer_bytes": decoder_layer_bytes(dims, tokens, regime),
            }
            for regime in REGIMES
        }
        models.append({"name": model.name, "source": model.source, "dims": dims.__dict__, **counts, "activations_per_meme": per_meme})
        for gpus in gpu_counts:
            estimates = deepspeed_estimates(counts["total"], counts["largest_layer"], gpus)
            for strategy, (label, config, regime) in STRATEGIES.items():
                states = lora_model_states(counts, strategy, gpus)
                estimate = estimates.get(strategy)
                for checkpointing in (False, True):
                    activations = peak_bytes(dims, tokens, regime, checkpointing, BATCH_PER_GPU)
                    total = states["gpu"] + activations["total"]
                    rows.append(
                        {
                            "model": model.name,
                            "gpus": gpus,
                            "strategy": label,
                            "config": "(none: one device)" if strategy == "ddp" and gpus == 1 else config,
                            "checkpointing": checkpointing,
                            "deepspeed_states_gib": None if estimate is None else estimate["gpu"] / GIB,
                            "deepspeed_host_per_node_gib": None if estimate is None else estimate["cpu"] / GIB,
                            "lora_states_gib": states["gpu"] / GIB,
                            "lora_host_per_node_gib": states["host_per_node"] / GIB,
                            "activations_gib": activations["total"] / GIB,
                            "activations_held_gib": activations["held"] / GIB,
                            "total_gib": total / GIB,
                            "fits": total / GIB <= usable,
                        }
                    )
    return {
        "tokens_per_meme": tokens,
        "image_tokens": patches // 4,
        "text_tokens": text_tokens,
        "patches_per_meme": patches,
        "batch_per_gpu": BATCH_PER_GPU,
        "capacity_gib": CAPACITY_GIB,
        "headroom_gib": headroom_gib,
        "models": models,
        "rows": rows,
    }


def main() -> None:
    from common import Result, parser

    from bench.activation_memory import SMOKE_VALIDATION, VALIDATION, validate
    from bench.memory_plan_docs import DOCS, docs_block, markdown_table, update_docs

    p = parser("GPU memory plan for Qwen-VL LoRA training: DeepSpeed's estimators, LoRA-aware states, activations", default_repeats=1)
    p.add_argument("--text-tokens", type=int, default=192, help="text tokens per meme: prompt and caption (an assumption; see docs)")
    p.add_argument(
        "--headroom-gib", type=float, default=HEADROOM_GIB, help="GiB per GPU kept free for CUDA context, buffers, fragmentation"
    )
    args = p.parse_args()
    result = Result(
        "memory_plan",
        "Which strategy= config fits Qwen2-VL / Qwen2.5-VL 7B and 72B LoRA training at 16 memes per GPU on 1, 8, 16 GPUs of 80 GB?",
        args,
        {
            "text_tokens": args.text_tokens,
            "image_size": 512,
            "batch_per_gpu": BATCH_PER_GPU,
            "lora": LORA,
            "headroom_gib": args.headroom_gib,
        },
    )
    validation = validate(SMOKE_VALIDATION if args.smoke else VALIDATION)
    result.payload["plan"] = plan(args.text_tokens, headroom_gib=args.headroom_gib)
    result.payload["validation"] = validation
    result.payload["deepspeed_printout_8_gpus"] = {
        m["name"]: deepspeed_estimates(m["total"], m["largest_layer"], 8)["printout"] for m in result.payload["plan"]["models"]
    }
    result.note(
        "No GPU was used or measured: model states are DeepSpeed's estimates or derived for LoRA; activations at the published sizes are derived by bench.activation_memory's formula, which the 'validation' rows check against saved-tensor bytes measured on CPU."
    )
    result.note(
        f"Text tokens per meme ({args.text_tokens}) are an assumption (Qwen's tokenizer is not available offline); image tokens are counted with the processor's smart_resize."
    )
    worst = max(abs(v["formula_over_measured"] - 1) for v in validation)
    for v in validation:
        key = f"{v['size']}_{v['regime']}_{'ckpt' if v['checkpointing'] else 'full'}"
        result.variant(f"measured_{key}", "MB", [v["measured_bytes"] / 1e6], over="one meme, saved-tensor bytes on CPU")
        result.variant(f"formula_{key}", "MB", [v["formula_bytes"] / 1e6], over="one meme, bench.activation_memory.held_bytes")
        result.ratio(f"formula_over_measured_{key}", v["formula_over_measured"], "formula / measured held bytes, one meme")
        if v["size"] == "B" and v["regime"] == "bf16":
            label = f"activation formula vs measured, size B, {'checkpointing' if v['checkpointing'] else 'no checkpointing'}"
            result.row(label, f"formula_{key}", f"measured_{key}", f"formula_over_measured_{key}", "formula_within_10pct", unit="MB")
    result.target("formula_within_10pct", worst, "<=", 0.10, "largest |formula / measured - 1| over every size, regime and checkpointing")
    usable = CAPACITY_GIB - args.headroom_gib
    table = markdown_table(result.payload["plan"]["rows"], usable, BATCH_PER_GPU)
    print(table)
    for model in ("Qwen2-VL-7B-Instruct", "Qwen2-VL-72B-Instruct"):
        fitting = [r for r in result.payload["plan"]["rows"] if r["model"].endswith(model) and r["gpus"] == 8 and r["fits"]]
        names = sorted({f"{r['config']}{' + checkpointing' if r['checkpointing'] else ''}" for r in fitting})
        result.finding(
            f"{model}, 8 GPUs, 16 memes per GPU: fits 80 GB with "
            + (", ".join(names) if names else "no configuration")
            + " (computed, not measured on a GPU)."
        )
    out = result.write()
    if not args.smoke and args.out is None:
        import json

        update_docs(docs_block(json.loads(out.read_text())))
        print(f"[memory_plan] rewrote the table in {DOCS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

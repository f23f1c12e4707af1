"""Qwen2-VL LoRA training throughput and MFU on GPUs, under crossmod's DDP and DeepSpeed ZeRO-3 strategies.

    python bench/gpu_throughput.py [--config qwen2-vl-7b] [--strategies ddp,deepspeed_zero3] [--devices 8]
                                   [--batch-size 16] [--image-size 512] [--text-tokens 64] [--steps 30] [--warmup 5]
    python bench/gpu_throughput.py --smoke        # on a GPU: the tiny config, a few steps (the `gpu` test)
    python bench/gpu_throughput.py --cpu-smoke    # no GPU: the whole script on the tiny config on CPU (CI)

Without CUDA the script refuses (exit code 2) unless `--cpu-smoke` is given; a CPU smoke run writes to
bench/results/smoke/ and its MFU is against a stated nominal CPU figure, flagged as not a GPU result.

What runs, per strategy, in its own process (Lightning launches one rank per device): the model built at
random from the published config (`bench.vlm_configs`, no download; bf16 weights on GPU, flash-attention 2
when `flash_attn` imports, else SDPA: crossmod's `attn_implementation=auto`), frozen, PEFT LoRA on the
language model's q,v (r 8, α 16, dropout 0.05: `model=vlm`'s preset via `crossmod.models.vlm.families`), crossmod's
head layer and masked loss on the last token's hidden state (the `head` readout of `VLMClassifier`),
AdamW lr 2e-4, trained by a Lightning `Trainer` whose strategy is instantiated from `configs/strategy/<name>.yaml`
(`trainer=gpu`: bf16-mixed). Under ZeRO-3 the model is built inside the strategy's sharded context with
Transformers told the DeepSpeed config, as `MemeClassifier.configure_model` does. The memes are identical
pre-built tensors of one length (no padding; data loading is measured by bench/data_loading.py).

Measured: wall time of the steps after `--warmup` (CUDA synchronised at every step end), split into
`--repeats` equal windows; memes/s and tokens/s over all ranks; peak `torch.cuda.max_memory_allocated` over
ranks. Computed: model FLOPs per meme (`bench.vlm_flops.count_flops`), MFU = model FLOP/s per device / the
device's peak dense bf16 FLOP/s (`bench.mfu.PEAK_BF16`, with sources).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, Result, compose, parser, repeats  # noqa: E402

NAME = "gpu_throughput"
STRATEGIES = ("ddp", "deepspeed_zero3")
HF_TRAINER = "hf_trainer"  # not a strategy: transformers.Trainer + PEFT on the same batches, the ratio's baseline
CULTURES = ("US", "DE", "MX", "IN", "CN")
HEADS = {culture: {"kind": "binary"} for culture in CULTURES}
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.05}
LR = 2e-4
NO_CUDA = (
    "bench/gpu_throughput.py measures training throughput and MFU on GPUs and needs a CUDA device, but "
    "torch.cuda.is_available() is False on this machine. Run it on a GPU machine, or pass --cpu-smoke to run "
    "the whole script on a tiny config on CPU (its figures are then not GPU measurements)."
)


def arguments(argv: list[str] | None = None):
    from bench.vlm_configs import PUBLISHED

    p = parser("Qwen2-VL LoRA training throughput and MFU on GPUs (DDP, DeepSpeed ZeRO-3)", default_repeats=3)
    p.add_argument("--cpu-smoke", action="store_true", help="the tiny config on CPU, results to bench/results/smoke/ (no GPU figure)")
    p.add_argument("--config", default="qwen2-vl-7b", choices=sorted(PUBLISHED))
    p.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help=f"comma-separated configs/strategy/ names, and {HF_TRAINER}: transformers.Trainer + PEFT on the same batches",
    )
    p.add_argument("--devices", type=int, default=None, help="GPUs per run (default: all visible)")
    p.add_argument("--batch-size", type=int, default=16, help="memes per device per step")
    p.add_argument("--image-size", type=int, default=512)
    p.add_argument("--text-tokens", type=int, default=64, help="non-image tokens per meme (prompt, caption, template)")
    p.add_argument("--steps", type=int, default=30, help="measured steps (split into --repeats windows)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--peak-tflops", type=float, default=None, help="peak dense bf16 TFLOP/s for a device the table lacks")
    p.add_argument("--worker", default=None, help=argparse_hidden())
    p.add_argument("--worker-out", type=Path, default=None, help=argparse_hidden())
    args = p.parse_args(argv)
    if args.smoke or args.cpu_smoke:  # the tiny config (bench.flop_counter_check.small_config), a few short steps
        args.batch_size, args.steps, args.warmup = min(args.batch_size, 2), min(args.steps, 6), 1
        args.repeats = args.repeats or 3
    if args.cpu_smoke:
        args.smoke = True  # never the committed results
    return args


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


# ---------------------------------------------------------------------------------------------- worker
def model_config(args) -> Any:
    from bench.flop_counter_check import small_config
    from bench.vlm_configs import named_config

    return small_config("qwen2_vl") if args.smoke else named_config(args.config)


def image_and_text(args) -> tuple[int, int]:
    from bench.flop_counter_check import SMALL_IMAGE, SMALL_TEXT_TOKENS

    return (SMALL_IMAGE, SMALL_TEXT_TOKENS) if args.smoke else (args.image_size, args.text_tokens)


class _Memes:
    """A map-style dataset of one pre-built meme repeated (every meme the same length: no padding)."""

    def __init__(self, config: Any, image_size: int, text_tokens: int, length: int) -> None:
        from bench.flop_counter_check import meme_inputs

        self.meme = meme_inputs(config, image_size, text_tokens)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.meme


def collate(memes: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    batch = {
        k: torch.cat([m[k] for m in memes]) for k in ("input_ids", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw")
    }
    batch["labels"] = {culture: torch.randint(0, 2, (len(memes),)).float() for culture in CULTURES}
    return batch


def lora_module(config: Any, attn_implementation: str, weights_dtype: Any):
    """crossmod's VLM `head` training step (VLMClassifier + HeadLayers + masked loss) on a model built from a config."""
    import lightning as L
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from crossmod.data.heads import parse_heads
    from crossmod.models.heads import HeadLayers, masked_loss
    from crossmod.models.sharding import tell_transformers, zero3_config
    from crossmod.models.vlm.classifier import adapter_autocast, last_token_index, model_inputs
    from crossmod.models.vlm.families import family_named

    heads = parse_heads(HEADS)

    class LoRATrainingStep(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = None

        def configure_model(self) -> None:
            """Built as MemeClassifier.configure_model builds: inside the strategy's init context, heads included."""
            if self.model is not None:
                return
            deepspeed = zero3_config(self.trainer.strategy)
            if deepspeed is not None:  # kept alive with the model: Transformers holds it by weak reference
                self._transformers_zero3 = tell_transformers(deepspeed)
            model = AutoModelForImageTextToText.from_config(config, dtype=weights_dtype, attn_implementation=attn_implementation)
            model.requires_grad_(False)
            targets = family_named("qwen2_vl").targets("qv")
            lora = LoraConfig(target_modules=targets, bias="none", **LORA)
            self.model = get_peft_model(model, lora, autocast_adapter_dtype=adapter_autocast())
            self.head_layers = HeadLayers(config.get_text_config().hidden_size, heads)

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
            hidden = self.model.get_base_model().model(**model_inputs(batch)).last_hidden_state
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            logits = self.head_layers(hidden[rows, last_token_index(batch["attention_mask"])].float())
            return torch.stack([masked_loss(logits[name], batch["labels"][name], head)[0] for name, head in heads.items()]).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)

    return LoRATrainingStep()


def strategy_and_precision(name: str, batch_size: int, cpu: bool) -> tuple[Any, str]:
    """The strategy as `train.py strategy=<name>` instantiates it (trainer=gpu: bf16-mixed; trainer=cpu: 32-true)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = compose([f"trainer={'cpu' if cpu else 'gpu'}", f"strategy={name}", f"data.batch_size={batch_size}"])
    return instantiate(cfg.trainer.strategy), OmegaConf.select(cfg, "trainer.precision")


class AttentionProfile:
    """Which SDPA backend and device kernels ran: ATen's attention ops and the attention kernels of one warm-up step
    under torch.profiler (attn_implementation says what was asked for; this says what PyTorch dispatched to). The
    profiler stops before the step's end is timed, so its work stays out of the measured windows."""

    ATTENTION = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention", "flash_attn")

    def __init__(self) -> None:
        self.profiler: Any = None
        self.ops: list[str] = []
        self.kernels: list[str] = []

    def start(self) -> None:
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.__enter__()

    def stop(self) -> None:
        import torch

        if self.profiler is None:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.profiler.__exit__(None, None, None)
        names = {event.name for event in self.profiler.events()}
        self.ops = sorted(n for n in names if n.startswith("aten::") and any(a in n for a in self.ATTENTION))
        device = (n for n in names if not n.startswith("aten::") and any(k in n.lower() for k in ("flash", "fmha", "attention")))
        self.kernels = sorted(device)[:8]
        self.profiler = None


def run_hf_worker(args) -> None:
    """The baseline of the ratio: transformers.Trainer + PEFT LoRA (q, v) + a linear head on the last token
    (bench/hf_baseline.py), on the same config, memes and batch size, one device, bf16 on GPU (TrainingArguments.bf16)."""
    import torch
    from transformers import AutoModelForImageTextToText, Trainer, TrainerCallback

    from bench.hf_baseline import LastTokenClassifier, training_arguments
    from crossmod.models.vlm.classifier import model_inputs, resolve_attn_implementation

    cpu = args.cpu_smoke
    if cpu:
        torch.set_num_threads(1)
    config = model_config(args)
    image_size, text_tokens = image_and_text(args)
    attention = "sdpa" if cpu else resolve_attn_implementation("auto")
    base = AutoModelForImageTextToText.from_config(config, dtype=torch.float32 if cpu else torch.bfloat16, attn_implementation=attention)
    model = LastTokenClassifier(base, len(CULTURES), LORA)
    memes = _Memes(config, image_size, text_tokens, (args.warmup + args.steps + 1) * args.batch_size)

    def hf_collate(items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = collate(items)
        return {**model_inputs(batch), "labels": torch.stack([batch["labels"][c] for c in CULTURES], dim=1)}

    class Timing(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.profile = AttentionProfile()

        def on_step_begin(self, arguments: Any, state: Any, control: Any, **unused: Any) -> None:
            if state.global_step == max(0, args.warmup - 1):
                self.profile.start()

        def on_step_end(self, arguments: Any, state: Any, control: Any, **unused: Any) -> None:
            if state.global_step - 1 == max(0, args.warmup - 1):
                self.profile.stop()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.ends.append(time.perf_counter())

    timing = Timing()
    with tempfile.TemporaryDirectory() as tmp:
        settings = dict(per_device_train_batch_size=args.batch_size, max_steps=args.warmup + args.steps, bf16=not cpu)
        trainer = Trainer(
            model=model, args=training_arguments(tmp, LR, use_cpu=cpu, **settings), train_dataset=memes, data_collator=hf_collate
        )
        trainer.add_callback(timing)
        error = None
        try:
            trainer.train()
        except torch.cuda.OutOfMemoryError as oom:
            error = f"CUDA out of memory at batch size {args.batch_size}: {str(oom).splitlines()[0]}"
    args.worker_out.write_text(
        json.dumps(
            {
                "strategy": "hf_trainer",
                "world_size": 1,
                "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                "attn_implementation": attention,
                "attention_ops": timing.profile.ops,
                "attention_kernels": timing.profile.kernels,
                "precision": "32-true" if cpu else "bf16 weights, bf16 autocast (TrainingArguments.bf16)",
                "batch_size_per_device": args.batch_size,
                "step_ends": timing.ends,
                "peak_memory_bytes_per_rank": [torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0],
                "peak_rss_bytes": _peak_rss() if cpu else None,
                "error": error,
            }
        )
    )
    if error is not None:
        raise SystemExit(3)


def run_worker(args) -> None:
    """One strategy's training run (every rank executes this); rank 0 writes the measurements to --worker-out."""
    if args.worker == HF_TRAINER:
        run_hf_worker(args)
        return
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback

    from crossmod.models.vlm.classifier import resolve_attn_implementation

    cpu = args.cpu_smoke
    if cpu:
        torch.set_num_threads(1)  # two threads on two shared cores made steps erratic (bench/README.md)
    config = model_config(args)
    image_size, text_tokens = image_and_text(args)
    attention = "sdpa" if cpu else resolve_attn_implementation("auto")
    strategy, precision = strategy_and_precision(args.worker, args.batch_size, cpu)
    devices = 1 if cpu else args.devices or torch.cuda.device_count()

    class StepEnds(Callback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_train_batch_end(self, *unused: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.ends.append(time.perf_counter())

    class AttentionKernels(Callback):
        def __init__(self, step: int) -> None:
            self.step, self.profile = step, AttentionProfile()

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == self.step:
                self.profile.start()

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == self.step:
                self.profile.stop()

    kernels = AttentionKernels(step=max(0, args.warmup - 1))  # a warmup step: its profiling stays out of the timed window
    timer = StepEnds()
    trainer = L.Trainer(
        accelerator="cpu" if cpu else "gpu",
        devices=devices,
        strategy=strategy,
        precision=precision,
        max_steps=args.warmup + args.steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[kernels, timer],  # the profiler stops before the step's end is timed
    )
    module = lora_module(config, attention, torch.float32 if cpu else torch.bfloat16)
    length = (args.warmup + args.steps + 1) * args.batch_size * devices
    loader = torch.utils.data.DataLoader(_Memes(config, image_size, text_tokens, length), batch_size=args.batch_size, collate_fn=collate)
    error = None
    try:
        trainer.fit(module, train_dataloaders=loader)
    except torch.cuda.OutOfMemoryError as oom:
        error = f"CUDA out of memory at batch size {args.batch_size} per device: {str(oom).splitlines()[0]}"
    peak = torch.tensor([torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0], device=trainer.strategy.root_device)
    peaks = trainer.strategy.all_gather(peak).flatten().tolist() if error is None else [int(peak.item())]
    if trainer.global_rank == 0:
        out = {
            "strategy": args.worker,
            "world_size": trainer.world_size,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "attn_implementation": attention,
            "attention_ops": kernels.profile.ops,
            "attention_kernels": kernels.profile.kernels,
            "precision": precision,
            "batch_size_per_device": args.batch_size,
            "step_ends": timer.ends,
            "peak_memory_bytes_per_rank": [int(p) for p in peaks],
            "peak_rss_bytes": _peak_rss() if cpu else None,
            "error": error,
        }
        args.worker_out.write_text(json.dumps(out))
    if error is not None:
        raise SystemExit(3)


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


# ---------------------------------------------------------------------------------------------- report
def report(runs: dict[str, dict[str, Any]], errors: dict[str, str], args) -> None:
    import torch

    from bench.mfu import CPU_NOMINAL, format_report, measurement_windows, override_peak, peak_for, throughput_report
    from bench.vlm_flops import count_flops

    image_size, text_tokens = image_and_text(args)
    config = model_config(args)
    flops = count_flops(config, image_size, text_tokens, "qv", LORA["r"], "head")
    config_name = "tiny qwen2_vl (bench.flop_counter_check.small_config)" if args.smoke else args.config
    result = Result(
        NAME,
        f"How fast does crossmod train the {config_name} LoRA classifier per GPU under DDP and ZeRO-3, and at what MFU?",
        args,
        {
            "config": config_name,
            "image_size": image_size,
            "text_tokens": text_tokens,
            "sequence_tokens": flops.sequence,
            "batch_size_per_device": args.batch_size,
            "steps": args.steps,
            "warmup": args.warmup,
            "model_tflops_per_meme": flops.train / 1e12,
            "cpu_smoke": bool(args.cpu_smoke),
        },
    )
    result.payload["flops"] = flops.as_dict()
    per_window: dict[str, list[float]] = {}
    for name, run in runs.items():
        device = run["device"]
        if args.cpu_smoke:
            peak = CPU_NOMINAL
        elif args.peak_tflops:
            peak = override_peak(device, args.peak_tflops)
        else:
            peak = peak_for(device)
        parts = measurement_windows(run["step_ends"], args.warmup, repeats(args), run["batch_size_per_device"] * run["world_size"])
        fused = run["attn_implementation"] in ("sdpa", "flash_attention_2")
        peak_memory = max(run["peak_memory_bytes_per_rank"]) or None
        whole = throughput_report(flops, sum(m for m, _ in parts), sum(s for _, s in parts), run["world_size"], peak, fused, peak_memory)
        per_window[name] = [m / s for m, s in parts]
        print(f"[{NAME}] {format_report(name, whole)}")
        extra = {k: v for k, v in whole.items() if k not in ("memes", "seconds")}
        if run["peak_rss_bytes"]:
            extra["peak_rss_bytes_cpu_process"] = run["peak_rss_bytes"]  # host memory of the CPU smoke run, not GPU memory
        result.variant(
            name,
            "memes/s",
            per_window[name],
            device=device,
            attn_implementation=run["attn_implementation"],
            attention_ops=run.get("attention_ops", []),
            attention_kernels=run.get("attention_kernels", []),
            **extra,
        )
        if peak is None:
            result.note(f"{name}: no peak bf16 figure for {device!r} in bench/mfu.py; pass --peak-tflops to get MFU.")
    if "ddp" in per_window and "deepspeed_zero3" in per_window:
        ratio = result.paired(
            "deepspeed_zero3/ddp", per_window["deepspeed_zero3"], per_window["ddp"], "ZeRO-3 memes/s / DDP memes/s, same window"
        )
        result.row(f"{config_name} LoRA step, memes/s", "deepspeed_zero3", "ddp", "deepspeed_zero3/ddp")
        result.finding(f"ZeRO-3 trains at {ratio:.2f}× DDP's memes/s ({statistics.median(per_window['ddp']):.2f} memes/s under DDP).")
    if "ddp" in per_window and HF_TRAINER in per_window:
        definition = "crossmod (Lightning, DDP, one device) memes/s / transformers.Trainer + PEFT memes/s, same config and batches"
        ratio = result.paired(f"ddp/{HF_TRAINER}", per_window["ddp"], per_window[HF_TRAINER], definition)
        result.row(f"{config_name} LoRA step, memes/s", "ddp", HF_TRAINER, f"ddp/{HF_TRAINER}")
        result.finding(f"crossmod trains at {ratio:.2f}× transformers.Trainer + PEFT's memes/s on the same batches.")
    for name, error in errors.items():
        result.note(f"{name} did not complete: {error}")
    if args.cpu_smoke:
        result.note("CPU smoke run: the tiny config on CPU, MFU against a nominal 1 TFLOP/s CPU figure. Not a GPU measurement.")
    else:
        result.note(f"Measured on {torch.cuda.get_device_name(0)}; FLOPs per meme are counted (bench/vlm_flops.py), not measured.")
    result.write()


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    if args.worker:
        run_worker(args)
        return
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        raise SystemExit(2)
    forwarded = _without_out(argv if argv is not None else sys.argv[1:])
    runs: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.strategies.split(","):
            out = Path(tmp) / f"{name}.json"
            command = [sys.executable, __file__, *forwarded, "--worker", name, "--worker-out", str(out)]
            print(f"[{NAME}] {name}: {' '.join(command[1:])}", flush=True)
            # KINETO_LOG_LEVEL=5: torch.profiler's C++ layer (the one-step attention profile) prints an ERROR line on
            # machines without CUDA ("gpuGetDeviceCount failed"), harmless there; its profiler_start/stop lines remain
            env = {**os.environ, "WANDB_MODE": "disabled", "KINETO_LOG_LEVEL": "5"}
            if args.cpu_smoke:  # else Lightning's DDP sets cores/processes threads: 2 on 2 shared cores, 35× slower steps
                env["OMP_NUM_THREADS"] = "1"
            done = subprocess.run(command, cwd=ROOT, env=env)
            run = json.loads(out.read_text()) if out.exists() else None
            if run is None or run.get("error"):
                errors[name] = run["error"] if run else f"worker exited with code {done.returncode} without a result"
                print(f"[{NAME}] {name}: {errors[name]}", file=sys.stderr)
                continue
            runs[name] = run
    if not runs:
        raise SystemExit(f"[{NAME}] no strategy completed: {errors}")
    report(runs, errors, args)


def _without_out(argv: list[str]) -> list[str]:
    """The command line minus `--out <file>` (workers write to their own temporary file)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            out.append(arg)
    return out


if __name__ == "__main__":
    main()

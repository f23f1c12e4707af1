"""The GPU proof's sections, each under its own time limit, results written after each (bench/gpu_proof.sh runs this).

    python bench/gpu_proof.py [--cpu-smoke] [--budget-s 480] [--out FILE] [--site DIR]

A short GPU lease must come back with numbers even when one part is slow or breaks: every section is a command with
a wall-time limit (cut to what is left of `--budget-s`), its exit status, its last output lines and the JSON result it
wrote, and `--out` is rewritten after each section. `--cpu-smoke` runs the same sections on this machine with the tiny
configs (the test suite does, tests/test_gpu_proof.py); its figures are never GPU measurements and say so.

Sections (GPU / CPU smoke):
- environment: device, driver-side CUDA, versions of the stack, where crossmod was imported from;
- gpu_tests: the `gpu`-marked tests (on CPU they are collected and skipped);
- throughput_2b: Qwen2-VL-2B-sized LoRA head training, bf16, one GPU, under `strategy=ddp` and `strategy=deepspeed_zero3`
  (bench/gpu_throughput.py: memes/s, tokens/s, MFU from crossmod's FLOP count, peak memory, the SDPA backend and
  kernels that ran), and transformers.Trainer + PEFT on the same batches for the ratio; CPU smoke: the tiny config
  under DDP and the Trainer;
- zero3_7b: a Qwen2-VL-7B-sized ZeRO-3 run of a few steps, its peak memory beside docs/performance.md's plan
  (bench/results/memory_plan.json); CPU smoke: the tiny config under ZeRO-3;
- zeroshot_batching: zero-shot answers batched (16) against one at a time, generated on the GPU through the predict loop
  zero-shot runs use (bench/zeroshot_generation.py); CPU smoke: its `--smoke` sizes;
- vision_cache: zero-shot prompts and training epochs with the frozen tower's features cached (cold, warm) against the
  tower, on the GPU (bench/vision_cache.py without its CPU cross-validation protocol); CPU smoke: its `--smoke` sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TAIL_LINES = 80  # a failing test's traceback runs through a training subprocess: 15 lines showed only its last frame
STACK = ("torch", "transformers", "lightning", "peft", "timm", "deepspeed", "flash-attn", "hydra-core", "webdataset", "crossmod")


def environment(site: str | None) -> dict[str, Any]:
    import torch

    versions = {}
    for name in STACK:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "device_count": torch.cuda.device_count() if cuda else 0,
        "cuda": torch.version.cuda,
        "capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
        "versions": versions,
        "python": sys.version.split()[0],
        "installed_into": site,
        "models_imported_from": _module_file("crossmod.models"),
    }


def _module_file(name: str) -> str | None:
    """Where a fresh interpreter outside the checkout imports the module from (the offline install, when there is one)."""
    done = subprocess.run([sys.executable, "-c", f"import {name}; print({name}.__file__)"], capture_output=True, text=True, cwd="/")
    return done.stdout.strip() or None


def _memory_plan(model: str) -> dict[str, Any] | None:
    """docs/performance.md's plan for the model on one GPU under ZeRO-3 (bench/results/memory_plan.json): its rows with
    and without activation checkpointing, and the micro-batch and tokens per meme they assume."""
    path = ROOT / "bench" / "results" / "memory_plan.json"
    if not path.is_file():
        return None
    plan = json.loads(path.read_text())["plan"]
    rows = [r for r in plan["rows"] if r["model"] == model and r["gpus"] == 1 and r["strategy"] == "ZeRO-3"]
    return {"batch_per_gpu": plan["batch_per_gpu"], "text_tokens": plan["text_tokens"], "image_tokens": plan["image_tokens"], "rows": rows}


def sections(cpu_smoke: bool, work: Path, throughput_strategies: str | None = None) -> list[dict[str, Any]]:
    """What runs, in order: name, wall-time limit on a GPU, the command, and where it writes its JSON result.
    `throughput_strategies`: throughput_2b's strategies when not all of them (a rerun of the one that failed)."""
    python, bench = sys.executable, str(ROOT / "bench")
    gpu_test_files = sorted(str(p) for p in (ROOT / "tests").rglob("test_*.py") if "mark.gpu" in p.read_text())
    smoke = ["--cpu-smoke"] if cpu_smoke else []
    return [
        {
            "name": "gpu_tests",
            "limit_s": 150,
            "command": [python, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *gpu_test_files],
            "result": None,
        },
        {
            "name": "throughput_2b",
            "limit_s": 240,  # three strategies: 170 s ran out before the third on an H200
            "command": [python, f"{bench}/gpu_throughput.py", *smoke, "--out", str(work / "throughput_2b.json")]
            + ["--strategies", throughput_strategies or ("ddp,hf_trainer" if cpu_smoke else "ddp,deepspeed_zero3,hf_trainer")]
            + ([] if cpu_smoke else ["--config", "qwen2-vl-2b", "--devices", "1", "--steps", "20", "--warmup", "3", "--repeats", "2"]),
            "result": work / "throughput_2b.json",
        },
        {
            "name": "zero3_7b",
            "limit_s": 150,
            "command": [
                python,
                f"{bench}/gpu_throughput.py",
                *smoke,
                "--out",
                str(work / "zero3_7b.json"),
                "--strategies",
                "deepspeed_zero3",
            ]
            + ([] if cpu_smoke else ["--config", "qwen2-vl-7b", "--devices", "1", "--steps", "4", "--warmup", "1", "--repeats", "1"])
            + (
                [] if cpu_smoke else ["--batch-size", "16", "--text-tokens", "192", "--image-size", "512"]
            ),  # the plan's micro-batch and tokens
            "result": work / "zero3_7b.json",
            "plan": None if cpu_smoke else _memory_plan("Qwen/Qwen2-VL-7B-Instruct"),
        },
        {
            "name": "zeroshot_batching",
            "limit_s": 80,
            "command": [python, f"{bench}/zeroshot_generation.py", "--out", str(work / "zeroshot.json")]
            + (["--smoke"] if cpu_smoke else ["--accelerator", "gpu", "--repeats", "3"]),
            "result": work / "zeroshot.json",
        },
        {
            "name": "vision_cache",
            "limit_s": 90,
            "command": [python, f"{bench}/vision_cache.py", "--no-cv", "--out", str(work / "vision_cache.json")]
            + (["--smoke"] if cpu_smoke else ["--accelerator", "gpu", "--repeats", "2"]),
            "result": work / "vision_cache.json",
        },
    ]


def run_section(section: dict[str, Any], limit_s: float) -> dict[str, Any]:
    """Run one section's command under `limit_s`; what it printed last and the result it wrote, whatever its end."""
    started = time.monotonic()
    record: dict[str, Any] = {"command": shlex.join(map(str, section["command"])), "limit_s": round(limit_s)}
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(section["command"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit_s)
        record.update(exit_code=done.returncode, timed_out=False, output=(done.stdout + done.stderr).splitlines()[-TAIL_LINES:])
    except subprocess.TimeoutExpired as expired:
        said = (expired.stdout or b"").decode(errors="replace") if isinstance(expired.stdout, bytes) else expired.stdout or ""
        record.update(exit_code=None, timed_out=True, output=said.splitlines()[-TAIL_LINES:])
    record["seconds"] = round(time.monotonic() - started, 1)
    result = section.get("result")
    record["result"] = json.loads(Path(result).read_text()) if result and Path(result).is_file() else None
    if section.get("plan") is not None:
        record["memory_plan"] = section["plan"]
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-smoke", action="store_true", help="the same sections with the tiny configs on CPU (no GPU figure)")
    p.add_argument("--budget-s", type=float, default=480.0, help="wall time for every section together, imports included")
    p.add_argument("--out", type=Path, default=None, help="default: bench/results/gpu_proof.json (smoke: bench/results/smoke/)")
    p.add_argument("--site", default=None, help="the folder crossmod was installed into offline (bench/gpu_proof.sh), recorded")
    p.add_argument("--only", default=None, help="comma-separated sections to run (a second lease reruns what the first could not finish)")
    p.add_argument("--throughput-strategies", default=None, help="throughput_2b's strategies, comma-separated (default: all)")
    args = p.parse_args(argv)
    started = time.monotonic()
    out = args.out or ROOT / "bench" / "results" / ("smoke" if args.cpu_smoke else "") / "gpu_proof.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("bench/gpu_proof.py needs a CUDA device; pass --cpu-smoke to run its sections with the tiny configs on CPU", file=sys.stderr)
        return 2
    proof: dict[str, Any] = {
        "cpu_smoke": args.cpu_smoke,
        "note": "CPU smoke run: tiny configs on CPU, not a GPU measurement" if args.cpu_smoke else "measured on the GPU named below",
        "budget_s": args.budget_s,
        "environment": environment(args.site),
        "sections": {},
    }
    with tempfile.TemporaryDirectory(prefix="crossmod-gpu-proof-") as tmp:
        chosen = sections(args.cpu_smoke, Path(tmp), args.throughput_strategies)
        if args.only:
            unknown = set(args.only.split(",")) - {section["name"] for section in chosen}
            if unknown:
                p.error(f"--only: no section {', '.join(sorted(unknown))}; the sections are {', '.join(s['name'] for s in chosen)}")
            chosen = [section for section in chosen if section["name"] in args.only.split(",")]
        proof["only"] = args.only
        for section in chosen:
            left = args.budget_s - (time.monotonic() - started)
            if left < 20:
                proof["sections"][section["name"]] = {"skipped": f"{left:.0f} s of the budget left"}
            else:
                limit = min(left, section["limit_s"]) if not args.cpu_smoke else left
                proof["sections"][section["name"]] = run_section(section, limit)
            proof["seconds"] = round(time.monotonic() - started, 1)
            out.write_text(json.dumps(proof, indent=1) + "\n")  # after each section: a cut lease keeps what ran
            print(f"gpu_proof: {section['name']}: {_summary(proof['sections'][section['name']])}", flush=True)
    failed = [name for name, record in proof["sections"].items() if record.get("exit_code") != 0]
    print(f"gpu_proof: {len(proof['sections']) - len(failed)} of {len(proof['sections'])} sections passed in {proof['seconds']} s -> {out}")
    return 1 if failed else 0


def _summary(record: dict[str, Any]) -> str:
    if "skipped" in record:
        return f"skipped ({record['skipped']})"
    state = "timed out" if record["timed_out"] else f"exit {record['exit_code']}"
    return f"{state} in {record['seconds']} s"


if __name__ == "__main__":
    raise SystemExit(main())

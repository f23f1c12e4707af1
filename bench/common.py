"""Shared pieces of the benchmarks: machine description, robust statistics, model building, result files.

Every benchmark compares variants measured in the same process, interleaved (A, B, A, B …) so that
load from other jobs on a shared machine hits every variant alike, and reports min / median / max of
the repetitions plus the ratio of the medians. Results go to `bench/results/<name>.json`; `--smoke`
runs write to `bench/results/smoke/` (git-ignored) so they never replace the committed numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/<name>.py` puts bench/ first on the path, not the checkout
    sys.path.insert(0, str(ROOT))

from crossmod.runtime.console import configure_console  # noqa: E402  (after the path fix above)

configure_console()  # benchmarks print what crossmod's own jobs print: no advertisements, records once

STARTED = time.time()  # wall time of a benchmark counts from its import (model building included)
RESULTS_DIR = ROOT / "bench" / "results"
SMOKE_DIR = RESULTS_DIR / "smoke"
ASSETS_DIR = ROOT / "data" / "assets"  # the tiny models `make train` builds (paths.assets_dir), reused


def parser(description: str, default_repeats: int = 3) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.set_defaults(default_repeats=default_repeats)
    p.add_argument("--smoke", action="store_true", help="tiny sizes; result goes to bench/results/smoke/")
    p.add_argument("--repeats", type=int, default=None, help="rounds, every variant once per round (default: the script's own, smoke: 1)")
    p.add_argument("--out", type=Path, default=None, help="result file (default: bench/results[/smoke]/<name>.json)")
    return p


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("torch", "lightning", "transformers", "webdataset", "timm", "PIL", "peft"):
        try:
            module = __import__(name)
            out[name] = getattr(module, "__version__", "?")
        except ImportError:
            pass
    return out


def machine() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "kind": f"{os.cpu_count()} CPU cores ({platform.machine()}), " + ("GPU" if torch.cuda.is_available() else "no GPU"),
    }


def stats(values: list[float]) -> dict[str, Any]:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "values": [round(v, 6) for v in values],
    }


def interleave(variants: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[Any]]:
    """Run every variant once per round; return each variant's measurements (whatever its function returns: a
    number or a dict of numbers), in round order.

    The orders are rotated and, every other round, reversed (ABC, CBA, BCA, ACB, CAB, BAC): over 2·n rounds
    each variant runs in every position equally often and before each other variant as often as after it, so
    a machine that drifts during the run (it does on this shared VM: a few % slower by the end) favours none
    (a plain rotation of three over five rounds puts one variant after another in three of them)."""
    names = list(variants)
    out: dict[str, list[Any]] = {name: [] for name in names}
    for round_index in range(repeats):
        shift = (round_index // 2) % len(names)
        order = names[shift:] + names[:shift]
        for name in reversed(order) if round_index % 2 else order:
            out[name].append(variants[name]())
            shown = out[name][-1]
            shown = (
                {k: round(v, 6) for k, v in shown.items() if isinstance(v, (int, float))} if isinstance(shown, dict) else round(shown, 6)
            )
            print(f"  round {round_index + 1}/{repeats} {name}: {shown}", flush=True)
    return out


def column(runs: list[dict[str, float]], key: str) -> list[float]:
    return [run[key] for run in runs]


class Result:
    """Collects one benchmark's description and measurements and writes the JSON file."""

    def __init__(self, name: str, question: str, args: argparse.Namespace, parameters: dict[str, Any]) -> None:
        self.name, self.args = name, args
        self.start = STARTED
        self.payload: dict[str, Any] = {
            "benchmark": name,
            "question": question,
            "smoke": bool(args.smoke),
            "command": f"python bench/{name}.py" + (" --smoke" if args.smoke else ""),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine(),
            "versions": versions(),
            "load_average_start": load_average(),
            "parameters": parameters,
            "repetitions": repeats(args),
            "variants": {},
            "ratios": {},
            "targets": [],
            "rows": [],
            "findings": [],
            "notes": [],
        }

    def variant(self, name: str, unit: str, values: list[float], **extra: Any) -> None:
        self.payload["variants"][name] = {"unit": unit, **stats(values), **extra}

    def ratio(self, name: str, value: float, definition: str, values: list[float] | None = None) -> None:
        """`values`: the per-round ratios (variant / baseline of the same round) when `value` is their median."""
        entry: dict[str, Any] = {"value": round(value, 4), "definition": definition}
        if values is not None:
            entry.update({k: round(v, 4) if isinstance(v, float) else v for k, v in stats(values).items()})
        self.payload["ratios"][name] = entry

    def paired(self, name: str, variant: list[float], baseline: list[float], definition: str) -> float:
        """Record the median over rounds of variant / baseline measured in the same round (adjacent in time,
        so under the same load from other jobs), with min–max; return the median."""
        values = [v / b for v, b in zip(variant, baseline)]
        median = statistics.median(values)
        self.ratio(name, median, definition, values)
        return median

    def target(self, name: str, measured: float, op: str, threshold: float, description: str, times: bool = False) -> bool:
        """`times`: the README shows the threshold as a factor (0.7×), not as a share (70 %)."""
        met = measured <= threshold if op == "<=" else measured >= threshold
        entry = {
            "name": name,
            "description": description,
            "measured": round(measured, 4),
            "op": op,
            "threshold": threshold,
            "met": bool(met),
        }
        self.payload["targets"].append({**entry, "times": True} if times else entry)
        return met

    def row(
        self, label: str, variant: str, baseline: str | None, ratio: str, target: str | None = None, scale: float = 1.0, unit: str = ""
    ) -> None:
        """A line of the README table: variant (and baseline) median with min–max, the ratio, the target."""
        self.payload["rows"].append(
            {"label": label, "variant": variant, "baseline": baseline, "ratio": ratio, "target": target, "scale": scale, "unit": unit}
        )

    def finding(self, text: str) -> None:
        """A sentence for the README under the table, written from the measured numbers."""
        self.payload["findings"].append(text)

    def note(self, text: str) -> None:
        self.payload["notes"].append(text)

    def write(self) -> Path:
        self.payload["load_average_end"] = load_average()
        self.payload["wall_s"] = round(time.time() - self.start, 1)
        self.payload["met"] = all(t["met"] for t in self.payload["targets"]) if self.payload["targets"] else None
        out = self.args.out or (SMOKE_DIR if self.args.smoke else RESULTS_DIR) / f"{self.name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.payload, indent=1, ensure_ascii=False) + "\n")
        print(f"[{self.name}] wrote {out} ({self.payload['wall_s']} s)", flush=True)
        for t in self.payload["targets"]:
            print(f"[{self.name}] {t['name']}: {t['measured']} {t['op']} {t['threshold']} -> {'met' if t['met'] else 'NOT met'}")
        return out


def repeats(args: argparse.Namespace) -> int:
    return args.repeats or (1 if args.smoke else args.default_repeats)


def compose(overrides: list[str], output_dir: str | None = None):
    """The training config as `train.py` composes it (with `paths.data_dir` pointing at the checkout's data)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import crossmod.runtime.resolvers  # noqa: F401

    GlobalHydra.instance().clear()
    output_dir = output_dir or str(Path(tempfile.gettempdir()) / "crossmod-bench-unused")  # interpolated, never written
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose(
            "train", overrides=[f"paths.data_dir={ROOT / 'data'}", f"paths.output_dir={output_dir}", "name=bench", *overrides]
        )


def build_model(overrides: list[str]):
    """A MemeClassifier with its backbone built, from `model=…` overrides (tiny models built on first use)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = compose(overrides)
    model = instantiate(OmegaConf.to_container(cfg.model, resolve=True), _recursive_=False)
    model.configure_model()
    return model, cfg


def bare_trainer(**kwargs: Any):
    """A one-epoch CPU Trainer with nothing around the loop (no logger, checkpoints, progress bar, summary,
    sanity check): the benchmarks' measured loops, with their own steps, callbacks and profiler."""
    import lightning as L

    base = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    return L.Trainer(**{**base, **kwargs})


def synthetic_samples(count: int, image_size: int = 128, seed: int = 0) -> list:
    """The first `count` Sample records of the synthetic generator (as the data config draws them)."""
    from crossmod.data.synthetic import SyntheticMemeSource

    source = SyntheticMemeSource(num_groups=count // 9 + 1, image_size=image_size, seed=seed)
    out = []
    for sample in source:
        out.append(sample)
        if len(out) == count:
            break
    return out


def raw_dict(sample) -> dict[str, Any]:
    """A Sample as the loader hands it to the preprocessor (what `decode_shard_entry` returns)."""
    return {
        "id": sample.id,
        "group": sample.group,
        "lang": sample.lang,
        "text": sample.text,
        "image": sample.image,
        "labels": dict(sample.labels),
        "split": sample.split,
        "meta": dict(sample.meta),
    }

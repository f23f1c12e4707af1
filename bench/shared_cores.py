"""Two trainings on one machine: each no slower than 2.2× a lone one.

    python bench/shared_cores.py [--smoke] [--repeats 3] [--steps 30]

Each training is its own process (`--worker`), as two `python train.py` started side by side are: it takes
crossmod's thread rule (src/crossmod/runtime/threads.py `share_cores`: cores / the run's local processes, so every core on this
machine for one CPU run), builds `model=concat`, and times plain training steps on pre-built batches
(bench/training_overhead.py's loop). Variants, interleaved per round: one training alone, then two at once, under
crossmod's OpenMP wait policy (src/crossmod/runtime/threads.py: idle OpenMP threads sleep) and under the OpenMP default (idle
threads spin, holding the core another process needs). The ratio is the pair's slower training's s/step over the
lone one's in the same round.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Result, parser, repeats, stats  # noqa: E402

NAME = "shared_cores"
TARGET = 2.2
# None: what crossmod's entry points leave in the environment; " ": libgomp's own default (a value it reads as unset,
# with a one-line complaint on the worker's stderr), since crossmod fills in an unset one
POLICIES = {"crossmod": None, "openmp default": " ", "spin": "ACTIVE"}


def worker(steps: int, warmup: int, batch_size: int) -> None:
    """One training in this process: prints its mean s/step as JSON."""
    from common import build_model, raw_dict, synthetic_samples
    from training_overhead import plain_loop

    import crossmod.runtime.threads  # noqa: F401  (crossmod's wait policy, before torch starts OpenMP)
    from crossmod.runtime.threads import share_cores

    threads = share_cores(1)
    base, _ = build_model(["model=concat"])
    samples = synthetic_samples(batch_size * 4)
    pre = base.preprocessor
    batches = [pre.collate([pre(raw_dict(s)) for s in samples[i : i + batch_size]]) for i in range(0, len(samples), batch_size)]
    timed = plain_loop(base, batches, warmup, steps)
    print(json.dumps({"s_per_step": timed["mean"], "threads": threads, "wait_policy": os.environ.get("OMP_WAIT_POLICY")}))


def trainings(count: int, policy: str | None, args) -> list[dict]:
    """`count` worker processes started together; each one's result."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--batch-size",
        str(args.batch_size),
    ]
    processes = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(count)]
    outputs = [p.communicate(timeout=1800)[0] for p in processes]
    if any(p.returncode for p in processes):
        raise RuntimeError(f"a worker failed: {[p.returncode for p in processes]}")
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def main() -> None:
    p = parser(__doc__.splitlines()[0], default_repeats=3)
    p.add_argument("--worker", action="store_true", help="internal: run one training and print its s/step")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    args = p.parse_args()
    args.steps = args.steps or (3 if args.smoke else 30)
    args.warmup = args.warmup or (1 if args.smoke else 5)
    args.batch_size = args.batch_size or (4 if args.smoke else 32)
    if args.worker:
        return worker(args.steps, args.warmup, args.batch_size)

    result = Result(
        NAME,
        "Two trainings side by side on one machine, each against the same training alone (s/step)",
        args,
        {"model": "concat", "batch_size": args.batch_size, "timed_steps": args.steps, "warmup_steps": args.warmup, "cores": os.cpu_count()},
    )
    policies = {"crossmod": None} if args.smoke else POLICIES  # smoke: the code path, three processes
    rounds: dict[str, list[float]] = {f"{name} {kind}": [] for name in policies for kind in ("alone", "pair")}
    ratios: dict[str, list[float]] = {name: [] for name in policies}
    threads = None
    for _ in range(repeats(args)):
        for name, policy in policies.items():
            (alone,) = trainings(1, policy, args)
            pair = trainings(2, policy, args)
            slower = max(r["s_per_step"] for r in pair)
            rounds[f"{name} alone"].append(alone["s_per_step"])
            rounds[f"{name} pair"].append(slower)
            ratios[name].append(slower / alone["s_per_step"])
            threads = alone["threads"]
    for name, values in rounds.items():
        result.variant(name, "s/step", values)
    for name, values in ratios.items():
        result.ratio(
            f"{name}: pair/alone", statistics.median(values), "median over rounds of (slower of the pair / alone, same round)", values
        )
    for name in policies:
        result.row(
            f"concat, batch {args.batch_size}: two trainings side by side ({name} wait policy)",
            f"{name} pair",
            f"{name} alone",
            f"{name}: pair/alone",
            f"pair <= {TARGET}x alone" if name == "crossmod" else None,
            scale=1000,
            unit="ms/step",
        )
    result.target(
        f"pair <= {TARGET}x alone",
        statistics.median(ratios["crossmod"]),
        "<=",
        TARGET,
        "each of two concurrent trainings, against one alone",
    )
    if "openmp default" in policies:
        cost = result.paired(
            "crossmod alone / openmp default alone",
            rounds["crossmod alone"],
            rounds["openmp default alone"],
            "what sleeping idle threads cost a training alone, against libgomp's own default",
        )
        pair = {name: statistics.median(values) for name, values in ratios.items()}
        result.finding(
            f"{threads} threads per training (crossmod's rule on {os.cpu_count()} cores). Side by side, the slower of two "
            f"trainings ran {pair['crossmod']:.2f}× a lone one's s/step with crossmod's wait policy (PASSIVE; rounds "
            f"{stats(ratios['crossmod'])['min']:.2f}–{stats(ratios['crossmod'])['max']:.2f}), {pair['openmp default']:.2f}× with "
            f"libgomp's default and {pair['spin']:.2f}× with ACTIVE (spinning). The price: alone, a training runs at {cost:.2f}× "
            "libgomp's default s/step; a machine given to one training can set OMP_WAIT_POLICY itself (crossmod keeps it)."
        )
    result.write()


if __name__ == "__main__":
    main()

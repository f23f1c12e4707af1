"""Training overhead: crossmod's MemeClassifier + Lightning Trainer against a plain PyTorch loop.

    python bench/training_overhead.py [--smoke] [--repeats 9] [--threads 1] [--model concat]

Same model (built once from `model=<family>`, every run starts from a copy of the same weights), the
same pre-built batches (collated once by the model's preprocessor, cycled), the same optimizer and
schedule (`parameter_groups()` + the config's optimizer and warmup schedule), the same number of
steps; the first `--warmup` steps of every run are excluded. Variants, interleaved per round:

* `plain`: `for batch: loss = model.heads_loss(model(batch), labels); backward; step; scheduler.step; zero_grad`
* `trainer_bare`: `Trainer.fit` with the real `MemeClassifier.training_step` on a DataLoader over the
  batches (`batch_size=None`), no logger, checkpointing, progress bar or model summary
* `trainer_configured`: the Trainer as `train.py` builds it (`trainer=cpu`, `callbacks=default`, the
  CSV logger at `log_every_n_steps` of the config)

A Lightning step is timed from `on_train_batch_start` of step `warmup` to `on_train_batch_start` of
step `warmup + steps`, so every inter-step gap (fetching, logging, callbacks, scheduler) is inside it.
"""

from __future__ import annotations

import copy
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Result, bare_trainer, build_model, column, interleave, parser, raw_dict, repeats, stats, synthetic_samples  # noqa: E402

NAME = "training_overhead"
TARGET = 1.10


class StepTimer:
    """Lightning callback: the start time of every step, so runs give per-step times after `warmup` steps."""

    def __init__(self) -> None:
        import lightning as L

        class _Timer(L.Callback):
            def __init__(inner) -> None:
                inner.starts: list[float] = []

            def on_train_batch_start(inner, trainer, module, batch, batch_idx) -> None:
                inner.starts.append(time.perf_counter())

        self.callback = _Timer()


def step_times(starts: list[float], warmup: int, steps: int) -> dict[str, float]:
    """Mean time per step over the timed window (every cost counted) and the median single step (robust to
    another job preempting this one for a few steps, but blind to work done only every n steps)."""
    if len(starts) < warmup + steps + 1:
        raise RuntimeError(f"only {len(starts)} steps ran, {warmup + steps + 1} needed")
    window = starts[warmup : warmup + steps + 1]
    return {"mean": (window[-1] - window[0]) / steps, "median": statistics.median(b - a for a, b in zip(window, window[1:]))}


def make_optimizer(model, total_steps: int):
    """What `MemeClassifier.configure_optimizers` builds, without a Trainer (total steps given)."""
    import inspect

    from hydra.utils import get_method, instantiate

    optimizer_cfg = dict(model.hparams.optimizer)
    optimizer_cfg.pop("weight_decay", None)
    optimizer = instantiate(optimizer_cfg, model.parameter_groups())
    scheduler_cfg = dict(model.hparams.scheduler or {})
    if not scheduler_cfg:
        return optimizer, None
    ratio, warm = scheduler_cfg.pop("warmup_ratio", None), scheduler_cfg.pop("warmup_steps", None)
    warmup = int(warm) if warm is not None else int((ratio or 0.0) * total_steps)
    args = {"optimizer": optimizer, "num_warmup_steps": warmup, "num_training_steps": total_steps}
    accepted = inspect.signature(get_method(scheduler_cfg["_target_"])).parameters
    return optimizer, instantiate(scheduler_cfg, **{k: v for k, v in args.items() if k in accepted})


def plain_loop(base, batches: list[dict], warmup: int, steps: int) -> dict[str, float]:
    model = copy.deepcopy(base)
    model.train()
    total = warmup + steps + 1  # as many optimizer steps as the Trainer runs (its schedule has the same length)
    optimizer, scheduler = make_optimizer(model, total)
    starts = []
    for i in range(total):
        starts.append(time.perf_counter())
        if i == warmup + steps:
            return step_times(starts, warmup, steps)
        batch = batches[i % len(batches)]
        loss = model.heads_loss(model(batch), batch["labels"])
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
    raise AssertionError("unreachable")


class BatchList:
    """Map-style dataset over the pre-built batches, cycled to `length` items."""

    def __init__(self, batches: list[dict], length: int) -> None:
        self.batches, self.length = batches, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        return self.batches[index % len(self.batches)]


def trainer_run(base, batches: list[dict], warmup: int, steps: int, configured: bool, cfg) -> dict[str, float]:
    from hydra.utils import instantiate
    from torch.utils.data import DataLoader

    model = copy.deepcopy(base)
    log_times: list[float] = []
    log = model.log

    def timed_log(*args, **kwargs) -> None:  # how long crossmod's per-step `self.log("train/loss", …)` takes
        start = time.perf_counter()
        log(*args, **kwargs)
        log_times.append(time.perf_counter() - start)

    model.log = timed_log
    total = warmup + steps + 1
    loader = DataLoader(BatchList(batches, total), batch_size=None, shuffle=False, num_workers=0)
    timer = StepTimer()
    root = Path(tempfile.mkdtemp(prefix="crossmod-bench-trainer-"))
    try:
        if configured:
            callbacks_cfg = copy.deepcopy(cfg.callbacks)
            for node in callbacks_cfg.values():  # the run directory of the config → this run's temp dir
                for key in ("dirpath", "predictions_dir"):
                    if node is not None and key in node:
                        node[key] = str(root / key)
            callbacks = [instantiate(node) for node in callbacks_cfg.values() if node is not None and "_target_" in node]
            loggers = [instantiate(node, save_dir=str(root)) for node in cfg.logger.values() if node is not None and "_target_" in node]
            trainer = instantiate(
                cfg.trainer,
                max_epochs=1,
                max_steps=total,
                default_root_dir=str(root),
                callbacks=[*callbacks, timer.callback],
                logger=loggers or False,
            )
        else:
            trainer = bare_trainer(max_steps=total, default_root_dir=str(root), callbacks=[timer.callback])
        trainer.fit(model, train_dataloaders=loader)
        return {**step_times(timer.callback.starts, warmup, steps), "log": statistics.median(log_times[warmup:])}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    p = parser(__doc__.splitlines()[0], default_repeats=9)
    p.add_argument("--model", default="concat", help="model family (configs/model/<name>.yaml)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps at the start of every run")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (same for every variant)")
    p.add_argument("--variants", nargs="+", default=["plain", "trainer_bare", "trainer_configured"])
    args = p.parse_args()
    smoke = args.smoke
    batch_size = args.batch_size or (4 if smoke else 32)
    steps = args.steps or (3 if smoke else 25)
    warmup = args.warmup or (1 if smoke else 5)
    distinct = 2 if smoke else 8

    import torch

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    base, cfg = build_model([f"model={args.model}"])
    samples = synthetic_samples(batch_size * distinct)
    pre = base.preprocessor
    batches = [pre.collate([pre(raw_dict(s)) for s in samples[i : i + batch_size]]) for i in range(0, len(samples), batch_size)]
    params = sum(p.numel() for p in base.parameters())

    result = Result(
        NAME,
        "Time per training step: MemeClassifier + Lightning Trainer against a plain PyTorch loop (same model, batches, optimizer, steps)",
        args,
        {
            "model": args.model,
            "parameters": params,
            "batch_size": batch_size,
            "distinct_batches": distinct,
            "timed_steps": steps,
            "warmup_steps": warmup,
            "torch_threads": args.threads,
            "optimizer": dict(base.hparams.optimizer),
            "scheduler": dict(base.hparams.scheduler or {}),
            "trainer_configured": "trainer=cpu callbacks=default logger=csv (as train.py builds them)",
            "input_shapes": {k: list(v.shape) for k, v in batches[0].items() if isinstance(v, torch.Tensor)},
        },
    )
    runs = {
        "plain": lambda: plain_loop(base, batches, warmup, steps),
        "trainer_bare": lambda: trainer_run(base, batches, warmup, steps, False, cfg),
        "trainer_configured": lambda: trainer_run(base, batches, warmup, steps, True, cfg),
    }
    runs_by_variant = interleave({name: runs[name] for name in args.variants}, repeats(args))
    measured = {name: column(runs, "mean") for name, runs in runs_by_variant.items()}
    robust = {name: column(runs, "median") for name, runs in runs_by_variant.items()}
    medians = {name: statistics.median(values) for name, values in measured.items()}
    plain = medians.get("plain")
    for name, values in measured.items():
        extra = {"median_ms": round(1000 * medians[name], 3), "median_single_step_s": stats(robust[name])}
        if "log" in runs_by_variant[name][0]:
            extra["self_log_ms_per_step"] = round(1000 * statistics.median(column(runs_by_variant[name], "log")), 3)
        if plain is not None and name != "plain":
            extra["overhead_ms_per_step"] = round(1000 * (medians[name] - plain), 3)
        result.variant(name, "s/step", values, **extra)
    if plain is not None:
        for name in [n for n in measured if n != "plain"]:
            ratio = result.paired(
                f"{name}/plain", measured[name], measured["plain"], f"median over rounds of (mean s/step of {name} / of plain, same round)"
            )
            result.ratio(f"{name}/plain (medians)", medians[name] / plain, f"median s/step of {name} over rounds / median s/step of plain")
            result.paired(
                f"{name}/plain (single step)",
                robust[name],
                robust["plain"],
                "the same with each run's median single-step time (robust to a few steps preempted by other jobs)",
            )
            result.row(
                f"{args.model}, batch {batch_size}: `{name}` vs `plain` loop",
                name,
                "plain",
                f"{name}/plain",
                f"{name} <= {TARGET}x plain",
                scale=1000,
                unit="ms/step",
            )
            result.target(
                f"{name} <= {TARGET}x plain",
                ratio,
                "<=",
                TARGET,
                f"{name}: median time per step at most {TARGET}x the plain loop's on CPU",
            )
    for name in [n for n in measured if n != "plain" and plain is not None]:
        variant, ratio = result.payload["variants"][name], result.payload["ratios"][f"{name}/plain"]
        result.finding(
            f"`{name}`: {ratio['value']:.2f}× the plain loop's time per step (rounds {ratio['min']:.2f}–{ratio['max']:.2f}×) at "
            f"{1000 * plain:.0f} ms per plain step; the medians differ by {variant['overhead_ms_per_step']:+.1f} ms per step. Measured directly, "
            f'the one thing `MemeClassifier.training_step` adds to forward and loss, `self.log("train/loss")`, costs '
            f"{variant['self_log_ms_per_step']:.2f} ms (Lightning's result collection); it updates no metric and copies nothing to the host "
            "(metrics are updated in val/test steps and computed at epoch end)."
        )
    result.note(
        f"torch intra-op threads fixed at {args.threads} for every variant: on a shared 2-core machine under load, 2 threads made "
        "steps erratic (OpenMP threads waiting on a preempted sibling), which no ratio can average out."
    )
    result.write()


if __name__ == "__main__":
    main()

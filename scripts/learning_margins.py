"""The learning tests' metrics over seeds and thread counts, and the thresholds the tests hold them to.

    python scripts/learning_margins.py [--recipes concat qwen2_vl_head ...] [--seeds 1234 1 2 3 4] [--threads 1 2]

A learning test (tests/training/test_synthetic_thresholds.py, test_unimodal_ceilings.py, test_vlm_learns.py,
test_vlm_families_learn.py, test_tag_generator_learns.py) trains one recipe at
seed 1234 and asserts a threshold. A recipe's metric moves with the seed, and with the number of compute threads
(float reductions summed in another order: docs/reproducibility.md), so each threshold must sit below the worst
value observed over seeds and the thread counts the suite (1 per pytest worker) and a user run (the core count)
use. Each check runs `train.py <recipe> seed=s` with `OMP_NUM_THREADS=t`; as many runs go side by side as the cores
hold threads. Rows go to `docs/learning_margins.json` (after each run: an interrupted job keeps what it measured), and
the table between the `learning-margins` markers of docs/reproducibility.md is rendered from it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python scripts/<name>.py` puts scripts/ first on the path, not the checkout
    sys.path.insert(0, str(ROOT))

from scripts.results_file import write_between  # noqa: E402
from scripts.zoo_table import TINY_VLM, val_ceiling  # noqa: E402

RESULTS = ROOT / "docs" / "learning_margins.json"
DOC = ROOT / "docs" / "reproducibility.md"
START, END = "<!-- learning-margins:start -->", "<!-- learning-margins:end -->"
CEILING_TOLERANCE = 0.03  # how far a model that cannot see the rule may exceed its view's ceiling (fit by chance)
ABLATION_EPOCHS = 3  # the ablated VLM runs' budget (tests/training/test_vlm_learns.py says why)


def _val(metrics: dict, run_dir: Path) -> float:
    return metrics["best"]["val"]["mean"]["auroc"]


def _us_gap(metrics: dict, run_dir: Path) -> float:
    """The US head's test AUROC against US labels minus against CN labels (the most disagreeing pair)."""
    from crossmod.evaluation.alignment import alignment_matrix, read_predictions

    matrix = alignment_matrix(*read_predictions(run_dir / "predictions" / "test.csv"))
    return matrix["US"]["US"] - matrix["US"]["CN"]


def _head_after_ablation_budget(metrics: dict, run_dir: Path) -> float:
    """The head run's val mean AUROC after the ablated runs' epochs, above the higher unimodal bound (ceiling +
    tolerance): with both modalities the same epochs must pass what either modality alone allows."""
    import csv

    (log,) = run_dir.glob("csv/**/metrics.csv")
    rows = [row for row in csv.DictReader(log.open()) if row.get("val/mean/auroc")]
    bound = max(val_ceiling(run_dir, view) for view in ("text_only", "image_only")) + CEILING_TOLERANCE
    return float(rows[ABLATION_EPOCHS - 1]["val/mean/auroc"]) - bound


def _tag_similarity(metrics: dict, run_dir: Path) -> float:
    return metrics["best"]["test"]["tags"]["similarity"]


def _over_ceiling(view: str) -> Callable[[dict, Path], float]:
    def measure(metrics: dict, run_dir: Path) -> float:
        return metrics["best"]["val"]["mean"]["auroc"] - val_ceiling(run_dir, view)

    return measure


@dataclass(frozen=True)
class Check:
    """One learning test's assertion: the metric it reads of a recipe's run, and the bound it holds it to."""

    recipe: str  # the RECIPES entry it reads a run of
    measure: Callable[[dict, Path], float]
    threshold: float
    at_least: bool  # True: metric >= threshold; False: metric <= threshold
    metric: str  # what the table calls the metric

    def holds(self, value: float) -> bool:
        return value >= self.threshold if self.at_least else value <= self.threshold

    def margin(self, value: float) -> float:
        return value - self.threshold if self.at_least else self.threshold - value


# recipe: train.py overrides (seed added per run)
RECIPES: dict[str, tuple[str, ...]] = {
    "concat": (),
    # the default recipe's old rate (a plateau for seed 1234 on some CPUs)
    "concat_lr_2e-3": ("model.optimizer.lr=2e-3",),
    "visual_bert": ("model=visual_bert", "test=false"),
    "text": ("model=text", "test=false"),
    "image": ("model=image", "test=false"),
    "qwen2_vl_head": ("experiment=synthetic_vlm", "test=false"),
    # the recipe's old rate and budget
    "qwen2_vl_head_6_epochs": ("experiment=synthetic_vlm", "model.optimizer.lr=1e-3", "trainer.max_epochs=6", "test=false"),
    "gemma3_head": ("experiment=synthetic_vlm", TINY_VLM.format(kind="gemma3"), "trainer.max_epochs=4", "test=false"),
    "smolvlm_head": ("experiment=synthetic_vlm", TINY_VLM.format(kind="smolvlm"), "trainer.max_epochs=4", "test=false"),
    "qwen2_vl_ablate_image": ("experiment=synthetic_vlm", "data.ablate=image", f"trainer.max_epochs={ABLATION_EPOCHS}", "test=false"),
    "qwen2_vl_ablate_text": ("experiment=synthetic_vlm", "data.ablate=text", f"trainer.max_epochs={ABLATION_EPOCHS}", "test=false"),
    "tag_generator": ("experiment=synthetic_tag_generator",),
}
# Recipes trained on another recipe's run, measured right after it (same seed and threads): the verbalizer starts from
# the head run's fine-tuned base, exported as a model folder (the recipe's two steps, tests/training/test_vlm_learns.py).
FOLLOW_UPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "qwen2_vl_head": ("verbalizer", ("experiment=synthetic_vlm_verbalizer", "test=false")),
}

# 0.95: what `make train` promises at the default seed (issue 57), between what either modality alone allows on val
# (the higher ceiling, 0.677, plus the 0.03 a model may exceed it by chance) and the fused ceiling (0.998: the best
# function of the (concept, subject) pair, label noise left in); at lr 1e-3 every measured seed reached 0.978-0.989
THRESHOLD_CONCAT = 0.95
CHECKS: dict[str, Check] = {
    "concat": Check("concat", _val, THRESHOLD_CONCAT, True, "val mean AUROC"),
    # 0.02: seed 1 on the AMD EPYC measured 0.044 at the old rate (worst of every machine); each head matching its own
    # culture best is asserted beside it
    "concat_us_vs_cn": Check("concat", _us_gap, 0.02, True, "US head: AUROC vs US − vs CN labels (test)"),
    # The old rate 2e-3, kept measured: seed 1234 reached 0.974 on an earlier machine, 0.8625 on an AMD EPYC and 0.764
    # on an AMD EPYC with AVX-512 (seeds 1-4: 0.98 on all three), the plateau issue 57 saw in `make train`
    "concat_lr_2e-3": Check("concat_lr_2e-3", _val, THRESHOLD_CONCAT, True, "val mean AUROC (lr 2e-3: the old rate)"),
    "concat_us_vs_cn_lr_2e-3": Check("concat_lr_2e-3", _us_gap, 0.02, True, "US head: AUROC vs US − vs CN labels (test; lr 2e-3)"),
    "visual_bert": Check("visual_bert", _val, 0.90, True, "val mean AUROC"),
    "text_below_ceiling": Check("text", _over_ceiling("text_only"), CEILING_TOLERANCE, False, "val AUROC − text ceiling"),
    "image_below_ceiling": Check("image", _over_ceiling("image_only"), CEILING_TOLERANCE, False, "val AUROC − image ceiling"),
    "qwen2_vl_head": Check("qwen2_vl_head", _val, 0.90, True, "val mean AUROC (lr 3e-4, 10 epochs)"),
    "qwen2_vl_head_after_ablation_budget": Check(
        "qwen2_vl_head",
        _head_after_ablation_budget,
        0.05,
        True,
        f"val AUROC after {ABLATION_EPOCHS} epochs − (higher unimodal ceiling + 0.03)",
    ),
    "qwen2_vl_head_6_epochs": Check("qwen2_vl_head_6_epochs", _val, 0.90, True, "val mean AUROC (lr 1e-3, 6 epochs: the old recipe)"),
    "gemma3_head": Check("gemma3_head", _val, 0.85, True, "val mean AUROC (4 epochs)"),
    "smolvlm_head": Check("smolvlm_head", _val, 0.85, True, "val mean AUROC (4 epochs)"),
    "qwen2_vl_ablate_image": Check(
        "qwen2_vl_ablate_image", _over_ceiling("text_only"), CEILING_TOLERANCE, False, "val AUROC − text ceiling"
    ),
    "qwen2_vl_ablate_text": Check(
        "qwen2_vl_ablate_text", _over_ceiling("image_only"), CEILING_TOLERANCE, False, "val AUROC − image ceiling"
    ),
    "verbalizer": Check("verbalizer", _val, 0.85, True, "val mean AUROC (3 epochs from the head run's exported base)"),
    "tag_generator": Check("tag_generator", _tag_similarity, 0.9, True, "test tag similarity, greedy tags (12 epochs)"),
}


def rows_of(recipe: str, seed: int, threads: int, run_dir: Path) -> list[dict]:
    """A row for each check that reads the recipe, from a finished run of `train.py <recipe> seed=<seed>` at `threads`."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    environment = metrics.get("environment", {})
    if environment.get("threads") != threads:
        raise ValueError(f"{run_dir}: ran with {environment.get('threads')} threads, not {threads}")
    curve, cpu = _val_curve(run_dir), environment.get("cpu", "unrecorded")
    return [
        {
            "check": name,
            "seed": seed,
            "threads": threads,
            "cpu": cpu,
            "value": round(check.measure(metrics, run_dir), 4),
            "val_curve": curve,
        }
        for name, check in CHECKS.items()
        if check.recipe == recipe
    ]


def measure(recipe: str, seed: int, threads: int, log_dir: Path, extra: tuple[str, ...] = ()) -> list[dict]:
    """Train the recipe once (and its follow-up on its run) and return a row for each check that reads them."""
    run_id = f"{recipe}-s{seed}-t{threads}"
    env = {
        **os.environ,
        "CROSSMOD_RUN_ID": run_id,
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    overrides = FOLLOW_UP_RECIPES[recipe] if recipe in FOLLOW_UP_RECIPES else RECIPES[recipe]
    command = [sys.executable, str(ROOT / "train.py"), *overrides, *extra, f"seed={seed}", f"paths.log_dir={log_dir}", "print_table=false"]
    subprocess.run(command, cwd=ROOT, check=True, env=env, stdout=subprocess.DEVNULL)
    (run_dir,) = log_dir.glob(f"*/runs/{run_id}")
    rows = rows_of(recipe, seed, threads, run_dir)
    if recipe in FOLLOW_UPS:
        follow_up, _ = FOLLOW_UPS[recipe]
        export = [sys.executable, str(ROOT / "export.py"), f"run={run_dir}", "culture=US", "merge=true", f"out={run_dir}/export"]
        subprocess.run(export, cwd=ROOT, check=True, env=env, stdout=subprocess.DEVNULL)
        rows += measure(follow_up, seed, threads, log_dir, (f"model.name_or_path={run_dir}/export/US/merged",))
    return rows


FOLLOW_UP_RECIPES = dict(FOLLOW_UPS.values())


def _val_curve(run_dir: Path) -> list[float]:
    """The run's val mean AUROC after each epoch (its CSV log): how early a recipe clears its threshold."""
    import csv

    logs = list(run_dir.glob("csv/**/metrics.csv"))
    if not logs:
        return []
    rows = [row for row in csv.DictReader(logs[0].open()) if row.get("val/mean/auroc")]
    if len(rows) > 2 and int(rows[-1]["step"]) == int(rows[-2]["step"]) + 1:
        rows = rows[:-1]  # the chosen weights validated again after fit, one step after the last epoch's row: not an epoch
    return [round(float(row["val/mean/auroc"]), 4) for row in rows]


def _key(row: dict) -> tuple:
    """A measurement is one check, seed, thread count and CPU: another CPU's kernels give another run."""
    return row["check"], row["seed"], row["threads"], row.get("cpu", "unrecorded")


def save(row: dict) -> dict:
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    key = _key(row)
    rows = [r for r in results["rows"] if _key(r) != key] + [row]
    results["rows"] = sorted(rows, key=lambda r: (list(CHECKS).index(r["check"]), r.get("cpu", ""), r["threads"], r["seed"]))
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    return results


def render(results: dict) -> str:
    lines = [
        "Each learning test's metric over seeds and compute threads (`OMP_NUM_THREADS`; the suite runs 1 per pytest worker, a "
        "user run the core count), measured by `scripts/learning_margins.py` on this repository's 2-core CPU machines (CPU: the run's `environment.cpu`; "
        "`--ingest` adds a learning test's own run), stored in "
        "`docs/learning_margins.json`. Worst: the value closest to the threshold; margin: how far it stays from it.",
        "",
        "| check | metric | CPU | threads | seeds | values (in the seeds' order) | worst | threshold | margin |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, check in CHECKS.items():
        for cpu, threads in sorted({(r.get("cpu", "unrecorded"), r["threads"]) for r in results["rows"] if r["check"] == name}):
            rows = [r for r in results["rows"] if r["check"] == name and r["threads"] == threads and r.get("cpu", "unrecorded") == cpu]
            values = [r["value"] for r in rows]
            worst = min(values) if check.at_least else max(values)
            bound = f"{'≥' if check.at_least else '≤'} {check.threshold}"
            lines.append(
                f"| `{name}` | {check.metric} | {cpu} | {threads} | {' '.join(str(r['seed']) for r in rows)} | {' '.join(f'{v:.3f}' for v in values)} | "
                f"{worst:.3f} | {bound} | {check.margin(worst):+.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1234, 1, 2, 3, 4])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, os.cpu_count() or 1])
    parser.add_argument("--jobs", type=int, default=None, help="runs side by side (default: as many as the cores hold threads)")
    parser.add_argument(
        "--ingest",
        nargs=4,
        metavar=("RECIPE", "SEED", "THREADS", "RUN_DIR"),
        action="append",
        default=[],
        help="rows from a finished run of the recipe's command at that seed and thread count (e.g. a learning test's own run)",
    )
    parser.add_argument("--render-only", action="store_true", help="re-render the table from docs/learning_margins.json")
    args = parser.parse_args()
    for recipe, seed, threads, run_dir in args.ingest:
        for row in rows_of(recipe, int(seed), int(threads), Path(run_dir)):
            save(row)
            print(json.dumps(row), flush=True)
    if not args.render_only and not args.ingest:
        cores, lock = os.cpu_count() or 1, Lock()
        with tempfile.TemporaryDirectory() as tmp:
            for threads in args.threads:
                jobs = [(recipe, seed) for recipe in args.recipes for seed in args.seeds]

                def one(job: tuple[str, int], threads: int = threads) -> None:
                    rows = measure(job[0], job[1], threads, Path(tmp))
                    with lock:
                        for row in rows:
                            save(row)
                            print(json.dumps(row), flush=True)

                with ThreadPoolExecutor(args.jobs or max(1, cores // threads)) as pool:
                    list(pool.map(one, jobs))
    write_between(DOC, START, END, render(json.loads(RESULTS.read_text())), ROOT)
    print(render(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()

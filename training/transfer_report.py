"""The culture-transfer table (Table 11) of a cross-validation folder: every experiment's fold runs, plus zero-shot answers.

Rows: `zero-shot` (a `training.zeroshot` run's answers.csv found under the folder, split by the same
held-out folds), `FT-<culture>` for each single-culture experiment and each multi-head experiment
(its own head per column); columns: every culture's labels of the held-out memes. Writes
`culture_transfer.{json,md,png}`; the folds of every row must hold out the same memes.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from evaluation.culture_transfer import Answers, transfer_markdown, transfer_table
from evaluation.plots import transfer_heatmap
from evaluation.summary import json_safe

THRESHOLD = 0.5


def _binary_probs(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    probs: dict[str, dict[str, float]] = {}
    oof = result["oof_predictions"]
    for sample_id, head, prob in zip(oof["id"], oof["head"], oof["probability"]):
        if not isinstance(prob, list):
            probs.setdefault(head, {})[sample_id] = prob
    return probs


def _decided(probs: dict[str, float]) -> Answers:
    return Answers(probability=probs, decision={i: int(p >= THRESHOLD) for i, p in probs.items()})


def _zeroshot_answers(path: Path, held_out: list[set[str]]) -> list[list[Answers]]:
    """Per fold, one answer set per prompt, restricted to that fold's held-out memes."""
    by_prompt: dict[str, Answers] = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            answers = by_prompt.setdefault(row["prompt"], Answers())
            answers.probability[row["id"]] = float(row["p_hate"])
            answers.decision[row["id"]] = None if row["prediction"] == "" else int(row["prediction"])
    folds = []
    for ids in held_out:
        folds.append(
            [
                Answers({i: a.probability[i] for i in ids if i in a.probability}, {i: a.decision[i] for i in ids if i in a.decision})
                for _, a in sorted(by_prompt.items())
            ]
        )
    return folds


def transfer_report(experiments: dict[str, dict[int, dict[str, Any]]], root: Path, out: Path) -> dict[str, Any] | None:
    """`experiments[name][fold]` = fold result. Returns the table (None when there is nothing to compare)."""
    if not experiments:
        return None
    first = next(iter(experiments.values()))
    folds = sorted(first)
    held_out = [set(first[k].get("held_out_labels", {})) for k in folds]
    if not all(held_out):
        return None
    problems = [
        f"{name}: its folds hold out other memes than {next(iter(experiments))}'s; left out of the transfer table"
        for name, runs in experiments.items()
        if sorted(runs) != folds or any(set(runs[k].get("held_out_labels", {})) != held_out[i] for i, k in enumerate(folds))
    ]
    usable = {name: runs for name, runs in experiments.items() if not any(name in p.split(":")[0] for p in problems)}
    cultures = sorted(
        {h for labels in first[folds[0]]["held_out_labels"].values() for h, v in labels.items() if v in (0, 1)},
        key=list(first[folds[0]]["held_out_labels"][next(iter(held_out[0]))]).index,
    )
    labels = [{c: {i: v[c] for i, v in first[k]["held_out_labels"].items() if v.get(c) in (0, 1)} for c in cultures} for k in folds]
    predictors: dict[str, dict[str, list[list[Answers]]]] = {}
    diagonal: dict[str, str] = {}
    zeroshot = sorted(root.rglob("zeroshot/answers.csv"))
    if zeroshot:
        per_fold = _zeroshot_answers(zeroshot[-1], held_out)
        predictors["zero-shot"] = {c: per_fold for c in cultures}
    for name, runs in usable.items():
        probs = [_binary_probs(runs[k]) for k in folds]
        heads = [h for h in probs[0] if h in cultures]
        if len(heads) == 1:
            row = f"FT-{heads[0]}"
            diagonal[row] = heads[0]
            predictors[row] = {c: [[_decided(p[heads[0]])] for p in probs] for c in cultures}
        elif heads:
            row = f"multi-head ({name})"
            predictors[row] = {c: [[_decided(p[c])] for p in probs] for c in cultures if c in heads}
    order = ["zero-shot", *(f"FT-{c}" for c in cultures)]
    ranked = sorted(predictors, key=lambda r: (order.index(r) if r in order else len(order), r))
    predictors = {r: predictors[r] for r in ranked if set(predictors[r]) == set(cultures)}
    if len(predictors) < 2 and "zero-shot" not in predictors and not diagonal:
        return None
    table = transfer_table(predictors, labels)
    out.mkdir(parents=True, exist_ok=True)
    notes = [
        "# Culture transfer (Table 11 layout)",
        "",
        "Rows: models (FT-<culture> = trained on that culture's labels only); columns: the culture whose labels judge them.",
        f"Each cell: mean ± sample std over {len(folds)} held-out folds; decisions at P(hate) ≥ {THRESHOLD}; zero-shot: mean over "
        "its prompts within each fold, unparseable answers counted wrong. <u>Underlined</u>: the row's own culture; **bold**: best per column.",
        "",
        "## Accuracy (%)",
        "",
        transfer_markdown(table, "acc", diagonal),
        "",
        "## AUROC",
        "",
        transfer_markdown(table, "auroc", diagonal),
        "",
        *[f"- **problem**: {p}" for p in problems],
        "![culture transfer](culture_transfer.png)",
        "",
    ]
    (out / "culture_transfer.md").write_text("\n".join(notes))
    transfer_heatmap(table, "acc", diagonal, out / "culture_transfer.png", "Accuracy by culture labels (held-out folds)")
    payload = {"table": table, "diagonal": diagonal, "folds": folds, "zeroshot_answers": str(zeroshot[-1]) if zeroshot else None}
    (out / "culture_transfer.json").write_text(json.dumps(json_safe({**payload, "problems": problems}), indent=1, allow_nan=False))
    return {**payload, "problems": problems}

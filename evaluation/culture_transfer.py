"""Culture transfer (the Multi3Hate study's Table 11): models trained on one culture's labels, judged by every culture's.

Rows are predictors (zero-shot, FT-<culture>, a multi-head model), columns are cultures' labels; each
cell is a metric per held-out fold, then mean ± sample std (ddof = 1) over folds. A predictor gives,
per fold and column, P(hate) (for AUROC) and a decision (for accuracy; None = an unparseable answer,
counted wrong). Several decisions per fold (a zero-shot model's prompts) are averaged within the fold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from sklearn.metrics import accuracy_score, roc_auc_score

from evaluation.summary import mean_std


@dataclass
class Answers:
    """One predictor's answers for one column on one fold: id → P(hate) and id → decision (None: invalid)."""

    probability: dict[str, float] = field(default_factory=dict)
    decision: dict[str, int | None] = field(default_factory=dict)


def fold_scores(answers: list[Answers], labels: dict[str, int]) -> dict[str, float]:
    """Accuracy (invalid = wrong) and AUROC of one fold, averaged over the predictor's answer sets (prompts)."""
    accs, aurocs = [], []
    for answer in answers:
        ids = sorted(i for i in labels if i in answer.decision)
        if len(ids) != len(labels):
            missing = sorted(set(labels) - set(answer.decision))[:3]
            raise ValueError(f"answers miss {len(labels) - len(ids)} labelled memes of the fold (e.g. {missing})")
        truth = np.array([labels[i] for i in ids])
        predicted = np.array([-1 if answer.decision[i] is None else answer.decision[i] for i in ids])
        accs.append(accuracy_score(truth, predicted))
        scored = [i for i in ids if answer.probability.get(i) is not None]
        y = [labels[i] for i in scored]
        aurocs.append(roc_auc_score(y, [answer.probability[i] for i in scored]) if len(set(y)) == 2 else math.nan)
    return {"acc": float(np.mean(accs)), "auroc": float(np.nanmean(aurocs)) if not all(map(math.isnan, aurocs)) else math.nan}


def transfer_table(
    predictors: dict[str, dict[str, list[list[Answers]]]], labels: list[dict[str, dict[str, int]]]
) -> dict[str, dict[str, dict[str, float]]]:
    """`predictors[row][column][fold]` = answer sets; `labels[fold][column]` = id → label of that culture.

    Returns `table[row][column]` with `acc_mean`, `acc_std`, `auroc_mean`, `auroc_std` and `folds`.
    """
    table: dict[str, dict[str, dict[str, float]]] = {}
    for row, columns in predictors.items():
        table[row] = {}
        for column, per_fold in columns.items():
            if len(per_fold) != len(labels):
                raise ValueError(f"{row}: {len(per_fold)} folds of answers for {len(labels)} folds of labels")
            scores = [fold_scores(answers, fold_labels[column]) for answers, fold_labels in zip(per_fold, labels)]
            cell: dict[str, float] = {"folds": len(scores)}
            for metric in ("acc", "auroc"):
                stats = mean_std(s[metric] for s in scores)
                cell[f"{metric}_mean"], cell[f"{metric}_std"] = stats["mean"], stats["std"]
            table[row][column] = cell
    return table


def transfer_markdown(table: dict[str, dict[str, dict[str, float]]], metric: str, diagonal: dict[str, str]) -> str:
    """Rows × culture columns, `mean ± std` (accuracy in %), the row's own culture underlined, best per column bold."""
    columns = list(next(iter(table.values())))
    scale = 100.0 if metric == "acc" else 1.0
    digits = 1 if metric == "acc" else 3
    best = {}  # every row tied at the column's best mean is bold
    for column in columns:
        means = [table[r][column][f"{metric}_mean"] for r in table if not math.isnan(table[r][column][f"{metric}_mean"])]
        best[column] = max(means) if means else math.nan
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for row, cells in table.items():
        out = []
        for column in columns:
            mean, std = cells[column][f"{metric}_mean"] * scale, cells[column][f"{metric}_std"] * scale
            text = "—" if math.isnan(mean) else f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" ± {std:.{digits}f}")
            if diagonal.get(row) == column:
                text = f"<u>{text}</u>"
            if cells[column][f"{metric}_mean"] == best[column]:
                text = f"**{text}**"
            out.append(text)
        lines.append(f"| {row} | " + " | ".join(out) + " |")
    return "\n".join(lines)

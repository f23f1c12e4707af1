"""Culture transfer (the Multi3Hate study's Table 11): models trained on one culture's labels, judged by every culture's.

Rows are predictors (zero-shot, FT-<culture>, a multi-head model), columns are cultures' labels; each
cell is a metric per held-out fold, then mean ± sample std (ddof = 1) over folds. A predictor gives,
per fold and column, P(hate) (for AUROC) and a decision (for accuracy; None = an unparseable answer,
counted wrong). Several decisions per fold (a zero-shot model's prompts) are averaged within the fold.
A fine-tuned row also carries what its fold run fitted on its own selection split: its head's calibration map
(the cells' ECE, Brier score and log-loss before and after it) and a moderation policy's thresholds (the cells'
held-out precision and recall per action at them); both are applied once to the held-out memes.
`fold_transfer` builds the predictors from cross-validation fold results (and zero-shot answers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from crossmod.evaluation.alignment import BEST
from crossmod.evaluation.baselines import LABELS
from crossmod.evaluation.calibration import apply_calibrator, calibration_scores, calibrator_of
from crossmod.evaluation.metrics import culture_auroc
from crossmod.evaluation.policies import held_out_rates
from crossmod.evaluation.predictions import binary_scores
from crossmod.evaluation.summary import mean_std


@dataclass
class Answers:
    """One predictor's answers for one column on one fold: id → P(hate) and id → decision (None: invalid)."""

    probability: dict[str, float] = field(default_factory=dict)
    decision: dict[str, int | None] = field(default_factory=dict)
    # decisions at a threshold chosen without the held-out memes (a fine-tuned model's selection split), scored by
    # macro-F1; None: no such threshold (macro-F1 is then undefined, never computed at 0.5 under that name)
    # (a zero-shot model's own answers, None = invalid, counted wrong)
    chosen: dict[str, int | None] | None = None
    # the probabilities through the calibration map the run fitted on its selection split (None: no map)
    calibrated: dict[str, float] | None = None
    # a policy's thresholds per action, chosen on the run's selection split (None: unreachable there; no policy: {})
    policy: dict[str, float | None] = field(default_factory=dict)


CALIBRATION = ("ece", "brier", "log_loss")
RATES = ("precision", "recall")


def _calibration(truth: np.ndarray, ids: list[str], answer: Answers) -> dict[str, float]:
    """ECE, Brier and log-loss of one answer set against a column's labels, before and after its run's map."""
    if answer.calibrated is None or not ids:
        return {}
    before = calibration_scores(truth, [answer.probability[i] for i in ids])
    after = calibration_scores(truth, [answer.calibrated[i] for i in ids])
    return {f"{m}_{when}": float(scores[m]) for m in CALIBRATION for when, scores in (("before", before), ("after", after))}


def _policy_rates(truth: np.ndarray, ids: list[str], answer: Answers) -> dict[str, float]:
    """Each action's precision and recall against a column's labels at its threshold (NaN where undefined)."""
    p, rates = np.array([answer.probability[i] for i in ids]), {}
    for action, cut in answer.policy.items():
        held_out = held_out_rates(truth, p, cut) if cut is not None else {}  # an unreachable action is never taken
        for rate in RATES:
            rates[f"{action}_{rate}"] = math.nan if held_out.get(rate) is None else float(held_out[rate])
    return rates


def fold_scores(answers: list[Answers], labels: dict[str, int]) -> dict[str, float]:
    """Accuracy (invalid = wrong), AUROC and macro-F1 at the chosen decisions of one fold, averaged over the
    predictor's answer sets (prompts)."""
    accs, aurocs, f1s, extra = [], [], [], []
    for answer in answers:
        ids = sorted(i for i in labels if i in answer.decision)
        if len(ids) != len(labels):
            missing = sorted(set(labels) - set(answer.decision))[:3]
            raise ValueError(f"answers miss {len(labels) - len(ids)} labelled memes of the fold (e.g. {missing})")
        truth = np.array([labels[i] for i in ids])
        predicted = np.array([-1 if answer.decision[i] is None else answer.decision[i] for i in ids])
        accs.append(accuracy_score(truth, predicted))
        if answer.chosen is not None:
            chosen = [-1 if answer.chosen.get(i) is None else answer.chosen[i] for i in ids]
            f1s.append(f1_score(truth, chosen, average="macro", labels=[0, 1], zero_division=0))
        scored = [i for i in ids if answer.probability.get(i) is not None]
        y = [labels[i] for i in scored]
        aurocs.append(culture_auroc(y, [answer.probability[i] for i in scored]))
        extra.append({**_calibration(np.array(y), scored, answer), **_policy_rates(np.array(y), scored, answer)})
    keys = sorted({k for e in extra for k in e})
    return {
        "acc": float(np.mean(accs)),
        "auroc": float(np.nanmean(aurocs)) if not all(map(math.isnan, aurocs)) else math.nan,
        "macro_f1": float(np.mean(f1s)) if len(f1s) == len(answers) else math.nan,
        # calibration and policy rates where every answer set has them (a fine-tuned row's one set), else NaN
        **{k: float(np.mean([e.get(k, math.nan) for e in extra])) for k in keys},
    }


def majority_rates(labels: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, float]]:
    """Per culture column, mean ± sample std over folds of the accuracy of always answering the fold's most frequent
    label: what an accuracy must beat to carry information."""
    columns = list(labels[0]) if labels else []
    rates = {c: [max(np.mean(list(fold[c].values())), 1 - np.mean(list(fold[c].values()))) for fold in labels] for c in columns}
    return {c: mean_std(float(r) for r in values) for c, values in rates.items()}


def transfer_table(
    predictors: dict[str, dict[str, list[list[Answers]]]], labels: list[dict[str, dict[str, int]]]
) -> dict[str, dict[str, dict[str, float]]]:
    """`predictors[row][column][fold]` = answer sets; `labels[fold][column]` = id → label of that culture.

    Returns `table[row][column]` with `acc_mean`, `acc_std`, `auroc_mean`, `auroc_std`, `macro_f1_mean`, `macro_f1_std`
    and `folds`.
    """
    table: dict[str, dict[str, dict[str, float]]] = {}
    for row, columns in predictors.items():
        table[row] = {}
        for column, per_fold in columns.items():
            if len(per_fold) != len(labels):
                raise ValueError(f"{row}: {len(per_fold)} folds of answers for {len(labels)} folds of labels")
            scores = [fold_scores(answers, fold_labels[column]) for answers, fold_labels in zip(per_fold, labels)]
            cell: dict[str, float] = {"folds": len(scores)}
            for metric in ("acc", "auroc", "macro_f1"):
                stats = mean_std(s[metric] for s in scores)
                cell[f"{metric}_mean"], cell[f"{metric}_std"] = stats["mean"], stats["std"]
            for metric in sorted({k for s in scores for k in s} - {"acc", "auroc", "macro_f1"}):
                stats = mean_std(s.get(metric, math.nan) for s in scores)  # folds where it is defined (`_n` of them)
                cell[f"{metric}_mean"], cell[f"{metric}_std"], cell[f"{metric}_n"] = stats["mean"], stats["std"], stats["n"]
            table[row][column] = cell
    return table


def transfer_markdown(
    table: dict[str, dict[str, dict[str, float]]],
    metric: str,
    diagonal: dict[str, str],
    majority: dict[str, dict[str, float]] | None = None,
) -> str:
    """Rows × culture columns, `mean ± std` (accuracy in %), the row's own culture underlined, best per column †."""
    columns = list(next(iter(table.values())))
    scale = 100.0 if metric == "acc" else 1.0
    digits = 1 if metric == "acc" else 3
    best = {}  # every row tied at the column's best mean is marked
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
                text += BEST
            out.append(text)
        lines.append(f"| {row} | " + " | ".join(out) + " |")
    if majority:  # the baseline row: never marked best, it is what the rows above must beat
        cells = [
            f"{majority[c]['mean'] * scale:.{digits}f}"
            + ("" if math.isnan(majority[c]["std"]) else f" ± {majority[c]['std'] * scale:.{digits}f}")
            for c in columns
        ]
        lines.append("| *majority class* | " + " | ".join(cells) + " |")
    return "\n".join(lines)


THRESHOLD = 0.5  # a fine-tuned model decides Hate at P(hate) ≥ this


def decided(
    probs: dict[str, float],
    threshold: float = THRESHOLD,
    chosen: float | None = None,
    calibrator: dict[str, Any] | None = None,
    policy: dict[str, float | None] | None = None,
) -> Answers:
    """A fine-tuned head's answers: its probabilities, a decision at `threshold` and, given what its run fitted on its
    selection split, the decisions at the threshold it chose, the probabilities through its calibration map and the
    policy's thresholds."""
    at_chosen = None if chosen is None else {i: int(p >= chosen) for i, p in probs.items()}
    ids = list(probs)
    calibrated = None if calibrator is None else dict(zip(ids, map(float, apply_calibrator([probs[i] for i in ids], calibrator))))
    return Answers(
        probability=probs, decision={i: int(p >= threshold) for i, p in probs.items()}, chosen=at_chosen,
        calibrated=calibrated, policy=dict(policy or {}),
    )  # fmt: skip


def answers_by_fold(by_prompt: dict[str, Answers], held_out: list[set[str]]) -> list[list[Answers]]:
    """Per fold, one answer set per prompt (prompts in sorted order), restricted to that fold's held-out memes."""
    folds = []
    for ids in held_out:
        folds.append(
            [
                Answers(
                    {i: a.probability[i] for i in ids if i in a.probability},
                    decision := {i: a.decision[i] for i in ids if i in a.decision},
                    chosen=decision,  # a zero-shot model's answers are its decisions: no threshold to choose
                )
                for _, a in sorted(by_prompt.items())
            ]
        )
    return folds


FoldResults = dict[str, dict[int, dict[str, Any]]]  # experiment → fold → fold result (fold_result.json)


def held_out_sets(experiments: FoldResults) -> tuple[list[int], list[set[str]]]:
    """The folds of the first experiment and the ids each holds out (every row must hold out the same)."""
    if not experiments:
        return [], []
    first = next(iter(experiments.values()))
    folds = sorted(first)
    return folds, [set(first[k].get("held_out_labels", {})) for k in folds]


def _chosen_thresholds(result: dict[str, Any]) -> dict[str, float]:
    """Head → the threshold the fold run chose on its selection split (fold_result.json), if it chose one."""
    heads = (result.get("selection_threshold") or {}).get("heads") or {}
    return {head: float(scores["val_threshold"]) for head, scores in heads.items() if "val_threshold" in scores}


def _calibrators(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Head → the calibration map the fold run fitted on its selection split (fold_result.json), if it fitted one."""
    heads = (result.get("calibration") or {}).get("heads") or {}
    return {head: calibrator_of(row) for head, row in heads.items()}


def _policy_cuts(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Head → action → the policy threshold the fold run chose on its selection split (None: unreachable there)."""
    heads = (result.get("policy") or {}).get("heads") or {}
    return {head: {a: c.get("threshold") for a, c in actions.items()} for head, actions in heads.items()}


def _head_answers(runs: dict[int, dict[str, Any]], folds: list[int], head: str, threshold: float, probs: list[dict]) -> list[list[Answers]]:
    """One fine-tuned head's answer set per fold, with what its fold run fitted for that head on its selection split."""
    out = []
    for k, p in zip(folds, probs):
        chosen, maps, cuts = _chosen_thresholds(runs[k]), _calibrators(runs[k]), _policy_cuts(runs[k])
        out.append([decided(p[head], threshold, chosen.get(head), maps.get(head), cuts.get(head))])
    return out


def fold_transfer(
    experiments: FoldResults, zeroshot: dict[str, Answers] | None = None, threshold: float = THRESHOLD
) -> dict[str, Any] | None:
    """Table 11 of cross-validation folds: `experiments[name][fold]` = fold result, `zeroshot` = prompt → answers
    over the same memes. Rows: zero-shot, FT-<culture> for each single-culture experiment, each multi-head
    experiment; columns: every binary culture of the held-out labels. Returns the table, its diagonal (row →
    own culture), the folds and the problems (experiments left out), or None when there is nothing to compare."""
    folds, held_out = held_out_sets(experiments)
    if not held_out or not all(held_out):
        return None
    first = next(iter(experiments.values()))
    problems = [
        f"{name}: its folds hold out other memes than {next(iter(experiments))}'s; left out of the transfer table"
        for name, runs in experiments.items()
        if sorted(runs) != folds or any(set(runs[k].get("held_out_labels", {})) != held_out[i] for i, k in enumerate(folds))
    ]
    usable = {name: runs for name, runs in experiments.items() if not any(name in p.split(":")[0] for p in problems)}
    first_labels = first[folds[0]]["held_out_labels"]
    cultures = sorted(
        {h for labels in first_labels.values() for h, v in labels.items() if v in (0, 1)},
        key=list(first_labels[next(iter(held_out[0]))]).index,
    )
    labels = [{c: {i: v[c] for i, v in first[k]["held_out_labels"].items() if v.get(c) in (0, 1)} for c in cultures} for k in folds]
    predictors: dict[str, dict[str, list[list[Answers]]]] = {}
    diagonal: dict[str, str] = {}
    if zeroshot is not None:
        per_fold = answers_by_fold(zeroshot, held_out)
        predictors["zero-shot"] = {c: per_fold for c in cultures}
    for name, runs in usable.items():
        probs = [binary_scores(runs[k]["oof_predictions"])[0] for k in folds]
        heads = [h for h in probs[0] if h in cultures]
        if len(heads) == 1:
            row = f"FT-{heads[0]}"
            diagonal[row] = heads[0]
            answers = _head_answers(runs, folds, heads[0], threshold, probs)
            predictors[row] = {c: answers for c in cultures}
        elif heads:
            row = f"multi-head ({name})"
            predictors[row] = {c: _head_answers(runs, folds, c, threshold, probs) for c in cultures if c in heads}
    order = ["zero-shot", *(f"FT-{c}" for c in cultures)]
    ranked = sorted(predictors, key=lambda r: (order.index(r) if r in order else len(order), r))
    predictors = {r: predictors[r] for r in ranked if set(predictors[r]) == set(cultures)}
    if len(predictors) < 2 and "zero-shot" not in predictors and not diagonal:
        return None
    return {
        "table": transfer_table(predictors, labels),
        "majority": majority_rates(labels),
        "positive_rate": {c: mean_std(float(np.mean(list(fold[c].values()))) for fold in labels) for c in cultures},
        "baselines": baseline_rows(usable, cultures, folds),
        "diagonal": diagonal,
        "folds": folds,
        "problems": problems,
        # the policies the fine-tuned rows' fold runs chose thresholds for (one name expected)
        "policy": sorted({str(runs[k]["policy"].get("name")) for runs in usable.values() for k in folds if runs[k].get("policy")}),
    }


def baseline_rows(experiments: FoldResults, cultures: list[str], folds: list[int]) -> dict[str, dict[str, dict[str, float]]]:
    """The linear baselines each culture's runs measured on the same held-out folds (fold results' `baselines`): per kind
    and culture column, mean ± sample std over folds of the baseline fitted on that culture's labels and judged by them.
    A culture no experiment measured on every fold is left out of the row (—)."""
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for kind in ("tfidf", "probe"):
        for culture in cultures:
            for runs in experiments.values():
                cells = [((runs[k].get("baselines") or {}).get(kind) or {}).get("test", {}).get(culture) for k in folds]
                if all(cells):
                    row = rows.setdefault(kind, {})
                    for metric in ("acc", "auroc"):
                        stats = mean_std(math.nan if c.get(metric) is None else c[metric] for c in cells)
                        row.setdefault(culture, {})[f"{metric}_mean"], row[culture][f"{metric}_std"] = stats["mean"], stats["std"]
                    break
    return rows


def _baseline_lines(transfer: dict[str, Any], metric: str) -> str:
    """The baselines' rows under a table (never marked best): each culture column's own linear baseline."""
    rows, columns = transfer.get("baselines") or {}, list(next(iter(transfer["table"].values())))
    scale, digits = (100.0, 1) if metric == "acc" else (1.0, 3)
    lines = []
    for kind, cells in rows.items():
        text = [
            f"{cells[c][f'{metric}_mean'] * scale:.{digits}f} ± {cells[c][f'{metric}_std'] * scale:.{digits}f}" if c in cells else "—"
            for c in columns
        ]
        lines.append(f"| *{LABELS[kind]} on the column's culture* | " + " | ".join(text) + " |")
    return "\n".join(lines)


def _cell(cell: dict[str, float], metric: str, scale: float = 1.0, digits: int = 3) -> str:
    mean, std = cell.get(f"{metric}_mean", math.nan) * scale, cell.get(f"{metric}_std", math.nan) * scale
    return "—" if math.isnan(mean) else f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" ± {std:.{digits}f}")


def calibration_markdown(table: dict[str, dict[str, dict[str, float]]], metric: str) -> str:
    """Fine-tuned rows × culture columns: `before → after` the row's own calibration map, mean ± std over folds."""
    columns = list(next(iter(table.values())))
    rows = {r: cells for r, cells in table.items() if any(f"{metric}_after_mean" in cells[c] for c in columns)}
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for row, cells in rows.items():
        lines.append(f"| {row} | " + " | ".join(f"{_cell(cells[c], f'{metric}_before')} → {_cell(cells[c], f'{metric}_after')}" for c in columns) + " |")
    return "\n".join(lines) if rows else ""


def policy_markdown(table: dict[str, dict[str, dict[str, float]]], action: str) -> str:
    """Fine-tuned rows × culture columns: held-out precision / recall of one action at the row's thresholds (%)."""
    columns = list(next(iter(table.values())))
    rows = {r: cells for r, cells in table.items() if any(f"{action}_precision_n" in cells[c] for c in columns)}
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for row, cells in rows.items():
        text = [" / ".join(_cell(cells[c], f"{action}_{rate}", 100.0, 1) for rate in RATES) for c in columns]
        lines.append(f"| {row} | " + " | ".join(text) + " |")
    return "\n".join(lines) if rows else ""


def _calibration_section(transfer: dict[str, Any]) -> list[str]:
    table = transfer["table"]
    tables = [(name, calibration_markdown(table, metric)) for name, metric in (("ECE", "ece"), ("Brier score", "brier"), ("Log-loss", "log_loss"))]
    if not any(text for _, text in tables):
        return []
    out = [
        "## Calibration",
        "",
        "Each cell: before → after the calibration map the row's fold run fitted on its own head's selection split "
        "(never the held-out fold), applied once to the held-out memes and judged by the column's labels; ECE over 10 "
        "equal-width bins on [0, 1] (crossmod.evaluation.calibration); mean ± sample std over folds.",
        "",
    ]
    for name, text in tables:
        out += [f"### {name}", "", text, ""]
    return out


def _policy_section(transfer: dict[str, Any]) -> list[str]:
    table, names = transfer["table"], transfer.get("policy") or []
    rate = transfer.get("positive_rate") or {}  # the baseline row: acting on every meme
    baseline = "| *positive rate (precision of acting on every meme)* | " + " | ".join(
        "—" if c not in rate else f"{rate[c]['mean'] * 100:.1f}" + ("" if math.isnan(rate[c]["std"]) else f" ± {rate[c]['std'] * 100:.1f}")
        for c in next(iter(table.values()))
    ) + " |"
    sections = [(a, text and f"{text}\n{baseline}") for a, text in ((a, policy_markdown(table, a)) for a in ("act", "review"))]
    if not any(text for _, text in sections):
        return []
    out = [
        f"## Policy ({', '.join(names)}): held-out precision / recall at its thresholds",
        "",
        "Each cell: precision / recall (%) of the action on the held-out memes, judged by the column's labels, at the "
        "thresholds the row's fold run chose for its own head on its selection split (configs/policy/); mean ± sample std "
        "over the folds where it is defined (— where a target was unreachable on the selection split, or nothing was flagged).",
        "",
    ]
    for action, text in sections:
        if text:
            out += [f"### {action}", "", text, ""]
    return out


def transfer_document(transfer: dict[str, Any], threshold: float = THRESHOLD) -> str:
    """culture_transfer.md: how to read the table, then accuracy and AUROC tables and the problems."""
    table, diagonal = transfer["table"], transfer["diagonal"]
    notes = [
        "# Culture transfer (Table 11 layout)",
        "",
        "Rows: models (FT-<culture> = trained on that culture's labels only); columns: the culture whose labels judge them.",
        f"Each cell: mean ± sample std over {len(transfer['folds'])} held-out folds; decisions at P(hate) ≥ {threshold}; zero-shot: mean over "
        "its prompts within each fold, unparseable answers counted wrong. <u>Underlined</u>: the row's own culture; †: best per column (no test).",
        "",
        "## Accuracy (%)",
        "",
        "\n".join(filter(None, [transfer_markdown(table, "acc", diagonal, transfer.get("majority")), _baseline_lines(transfer, "acc")])),
        "",
        "*majority class*: the accuracy of always answering the fold's most frequent label of that culture; an accuracy "
        "no higher carries no information.",
        "",
        "## Macro-F1 at the selection split's threshold",
        "",
        transfer_markdown(table, "macro_f1", diagonal),
        "",
        "Fine-tuned rows decide at the threshold that maximised macro-F1 of their own head on their fold's selection "
        "split (never the held-out fold), the same threshold for every column; zero-shot rows at their own answers "
        "(invalid counted wrong); — where a run chose no threshold (no selection split).",
        "",
        "## AUROC",
        "",
        "\n".join(filter(None, [transfer_markdown(table, "auroc", diagonal), _baseline_lines(transfer, "auroc")])),
        "",
        "*TF-IDF+LR* and *probe* rows: the baselines fitted on the column's culture (its training memes, C chosen on the "
        "selection split) and judged by its labels on the same held-out folds (crossmod.evaluation.baselines)."
        if transfer.get("baselines")
        else "",
        "",
        *_calibration_section(transfer),
        *_policy_section(transfer),
        *[f"- **problem**: {p}" for p in transfer["problems"]],
        "![culture transfer](culture_transfer.png)",
        "",
    ]
    return "\n".join(notes)

"""Cross-validation summary of fold results (`fold_result.json` contents): which folds count, and their scores.

Folds of one report must name one cross-validation selection rule and appear exactly once; their
held-out scores are summarised as mean ± sample std per head and metric, their out-of-fold
predictions pooled into one culture alignment matrix (each head's scores against every culture's
held-out labels; a head's own column is its pooled out-of-fold AUROC). `cv_markdown` renders it.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from crossmod.data.selection_rules import RULES
from crossmod.evaluation.alignment import BEST, alignment_matrix, alignment_table
from crossmod.evaluation.baselines import LABELS
from crossmod.evaluation.predictions import binary_scores
from crossmod.evaluation.summary import mean_std, shown

Where = TypeVar("Where")  # what locates a fold result in messages (its run directory)
FoldResult = dict[str, Any]


def rule_of(result: FoldResult) -> str | None:
    return (result.get("selection") or {}).get("rule")


def _cross_validation_rule(result: FoldResult) -> bool:
    return rule_of(result) in RULES and rule_of(result) not in ("dataset_val", "dataset_last")


def check_rules(runs: list[tuple[FoldResult, Where]]) -> tuple[list[tuple[FoldResult, Where]], list[str]]:
    """Keep fold results that name their selection rule; the folds of one report must share one rule."""
    problems = []
    unruled = [where for result, where in runs if not _cross_validation_rule(result)]
    if unruled:
        problems.append(
            f"{len(unruled)} fold result(s) name no cross-validation selection rule (written when the held-out fold also "
            f"chose the checkpoint): left out ({', '.join(str(w) for w in unruled)})"
        )
    kept = [(result, where) for result, where in runs if _cross_validation_rule(result)]
    rules = sorted({rule_of(result) for result, _ in kept})
    if len(rules) > 1:
        problems.append(f"folds were selected by different rules {rules}: nothing averaged")
        return [], problems
    return kept, problems


def check_folds(runs: list[tuple[FoldResult, Where]]) -> tuple[dict[int, tuple[FoldResult, Where]], list[str]]:
    """Keep folds present exactly once; describe every missing or duplicated fold."""
    by_fold: dict[int, list[tuple[FoldResult, Where]]] = defaultdict(list)
    for result, where in runs:
        by_fold[result["fold"]].append((result, where))
    expected = {result["num_folds"] for result, _ in runs if result.get("num_folds")}
    problems = []
    if len(expected) > 1:
        problems.append(f"runs disagree on num_folds: {sorted(expected)}")
    num_folds = max(expected) if expected else max(by_fold) + 1
    missing = sorted(set(range(num_folds)) - set(by_fold))
    if missing:
        problems.append(f"missing folds {missing} of {num_folds}")
    kept = {}
    for fold, entries in sorted(by_fold.items()):
        if len(entries) > 1:
            problems.append(f"fold {fold} appears {len(entries)} times ({', '.join(str(w) for _, w in entries)}); left out")
        else:
            kept[fold] = entries[0]
    return kept, problems


def check_scored(results: Mapping[int, FoldResult]) -> list[str]:
    """A fold whose held-out labels name memes its predictions never reached (a run with debug=limit or
    limit_test_batches): its scores are not its whole held-out fold's, and the report says so."""
    problems = []
    for fold, result in sorted(results.items()):
        unscored = sorted(set(result.get("held_out_labels", {})) - set(result["oof_predictions"]["id"]))
        if unscored:
            problems.append(
                f"fold {fold}: {len(unscored)} held-out memes were never scored (e.g. {unscored[:3]}; test batches limited, "
                "as by debug=limit?): its scores cover part of the fold"
            )
    return problems


def binary_oof(result: FoldResult) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """Out-of-fold scores of binary heads (scalar probabilities): head → id → p, and every binary
    dataset head's labels of the held-out memes (culture → id → label), not only the model's heads."""
    probs, labels = binary_scores(result["oof_predictions"])
    labels = defaultdict(dict, labels)
    for sample_id, heads in result.get("held_out_labels", {}).items():
        for head, label in heads.items():
            if isinstance(label, int) and label in (0, 1):
                labels[head][sample_id] = label
    return dict(probs), dict(labels)


@dataclass
class PooledOOF:
    """Every fold's out-of-fold binary scores and held-out labels together (head/culture → id → value)."""

    probs: dict[str, dict[str, float]]
    labels: dict[str, dict[str, int]]
    samples: int
    ids_in_two_folds: list[str]


def pool_out_of_fold(results: Mapping[int, FoldResult]) -> PooledOOF:
    """Pool the folds' out-of-fold predictions; an id held out by two folds is listed (it must not be)."""
    probs: dict[str, dict[str, float]] = defaultdict(dict)
    labels: dict[str, dict[str, int]] = defaultdict(dict)
    seen: dict[str, int] = {}
    overlap = set()
    for fold, result in results.items():
        fold_probs, fold_labels = binary_oof(result)
        ids = set(result["oof_predictions"]["id"])
        overlap |= {i for i in ids if i in seen}
        seen.update({i: fold for i in ids})
        for head in fold_probs:
            probs[head].update(fold_probs[head])
        for culture in fold_labels:  # every culture's labels, also those no head of this model predicts
            labels[culture].update(fold_labels[culture])
    return PooledOOF(dict(probs), dict(labels), len(seen), sorted(overlap))


def oof_reliability(results: Mapping[int, FoldResult]) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per binary head every fold calibrated: the pooled held-out memes' reliability bins (mean probability, observed
    rate) as scored and after each fold's own map (fitted on that fold's selection split, applied to its held-out
    memes only): the report's reliability diagram."""
    from crossmod.evaluation.calibration import apply_calibrator, calibrator_of, reliability_bins

    pooled: dict[str, dict[str, list[float]]] = {}
    for result in results.values():
        probs, labels = binary_oof(result)
        maps = (result.get("calibration") or {}).get("heads") or {}
        for head, by_id in probs.items():
            ids = [i for i in by_id if i in labels.get(head, {})]
            if head not in maps or not ids:
                continue
            row = pooled.setdefault(head, {"y": [], "p": [], "after": [], "folds": []})
            p = [by_id[i] for i in ids]
            row["y"] += [labels[head][i] for i in ids]
            row["p"] += p
            row["after"] += list(apply_calibrator(p, calibrator_of(maps[head])))
            row["folds"].append(result["fold"])
    curves = {}
    for head, row in pooled.items():
        if len(row["folds"]) != len(results):  # a fold without its map: no pooled "after" curve is made up
            continue
        before, after = reliability_bins(row["y"], row["p"]), reliability_bins(row["y"], row["after"])
        curves[head] = {"as scored": (before.predicted, before.observed), "each fold's own map": (after.predicted, after.observed)}
    return curves


def prefixed_mean_std(per_metric: dict[str, list[float]], prefix: str) -> dict[str, float]:
    """`{prefix}/{key}_mean` and `_std` (sample std) of each key's values, keys sorted."""
    summary = {}
    for key, values in sorted(per_metric.items()):
        stats = mean_std(values)
        summary[f"{prefix}/{key}_mean"], summary[f"{prefix}/{key}_std"] = stats["mean"], stats["std"]
    return summary


def _per_head_metric(scores_by_fold: list[dict[str, dict[str, float | None]]]) -> dict[str, list[float]]:
    per_metric: dict[str, list[float]] = defaultdict(list)
    for scores in scores_by_fold:
        for head, metrics in scores.items():
            if head == "all":
                continue
            for name, value in metrics.items():
                per_metric[f"{head}/{name}"].append(math.nan if value is None else value)
    return per_metric


def _every_fold(per_fold: list[dict[str, dict[str, float | None]]]) -> dict[str, list[float]]:
    """`_per_head_metric`, keeping only the scores every fold recorded: one some folds lack (a map or a head added
    after older fold files were written) is left out, never averaged over fewer folds."""
    return {key: values for key, values in _per_head_metric(per_fold).items() if len(values) == len(per_fold)}


def _threshold_scores(result: FoldResult) -> dict[str, dict[str, float]]:
    """Head (and `mean`) → held-out scores at the selection split's threshold, as the fold result recorded them."""
    recorded = result.get("selection_threshold") or {}
    heads = {head: {k: v for k, v in scores.items() if k != "val_threshold"} for head, scores in (recorded.get("heads") or {}).items()}
    return {**heads, "mean": recorded["mean"]} if heads else {}


def _calibration_scores(result: FoldResult) -> dict[str, dict[str, float]]:
    """Head (and `mean`) → the held-out fold's ECE, Brier and log-loss before and after the temperature its selection
    split chose, and that temperature, as the fold result recorded them."""
    recorded = result.get("calibration") or {}
    rows = {**(recorded.get("heads") or {}), **({"mean": recorded["mean"]} if recorded.get("heads") else {})}
    return {
        head: {
            **{f"{name}_{when}": row[when][name] for when in ("before", "after") for name in ("ece", "brier", "log_loss")},
            **({"temperature": row["temperature"]} if "temperature" in row else {}),
            **{f"{name}_{method}": row["compared"][method][name] for method in ("platt", "isotonic") if "compared" in row for name in ("ece", "brier", "log_loss")},
        }
        for head, row in rows.items()
    }


def summarise_calibration(results: Mapping[int, FoldResult]) -> dict[str, Any] | None:
    """Mean ± sample std over folds of each fold's held-out calibration scores before and after its own temperature
    (fitted on its selection split); None unless every fold recorded one."""
    per_fold = [_calibration_scores(r) for r in results.values()]
    if not per_fold or not all(per_fold):
        return None
    first = next(iter(results.values()))["calibration"]
    return {"rule": first["rule"], "bins": first["bins"], "metrics": prefixed_mean_std(_every_fold(per_fold), "cv")}


ABSTENTION_SCORES = ("aurc", "aurc_random", "aurc_oracle")


def summarise_abstention(results: Mapping[int, FoldResult]) -> dict[str, Any] | None:
    """Mean ± sample std over folds of each culture's held-out AURC (disagreement order) beside the random and oracle
    orders'; None unless every fold recorded one."""
    recorded = [r.get("abstention") or {} for r in results.values()]
    if not recorded or not all(r.get("heads") for r in recorded):
        return None
    per_fold = [{head: {k: row[k] for k in ABSTENTION_SCORES} for head, row in {**r["heads"], "mean": r["mean"]}.items()} for r in recorded]
    return {"rule": recorded[0]["rule"], "metrics": prefixed_mean_std(_every_fold(per_fold), "cv")}


POLICY_ACTIONS = ("act", "review")


def _policy_scores(recorded: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Head → per action its threshold, the precision or recall it reached on the selection split and the held-out
    fold's precision and recall at it (None where the target was unreachable there, or nothing was flagged)."""
    rows: dict[str, dict[str, float | None]] = {}
    for head, actions in (recorded.get("heads") or {}).items():
        row: dict[str, float | None] = {}
        for action in POLICY_ACTIONS:
            chosen = actions.get(action)
            if chosen is None:
                continue
            held_out = chosen.get("test") or {}
            row[f"{action}_threshold"] = chosen.get("threshold")
            row[f"{action}_reached"] = chosen.get("reached")
            row[f"{action}_unreachable"] = 0.0 if "threshold" in chosen else 1.0
            row[f"{action}_precision"], row[f"{action}_recall"] = held_out.get("precision"), held_out.get("recall")
        rows[head] = row
    return rows


def summarise_policy(results: Mapping[int, FoldResult]) -> dict[str, Any] | None:
    """Per culture and action, mean ± sample std over folds of each fold's policy threshold (chosen on its selection
    split) and of the held-out precision and recall at it (over the folds where they are defined), with the share of
    folds whose selection split could not meet the target; None unless every fold recorded the same policy."""
    recorded = [r.get("policy") or {} for r in results.values()]
    if not recorded or not all(r.get("heads") for r in recorded) or len({r.get("name") for r in recorded}) != 1:
        return None
    per_fold = []
    for policy, result in zip(recorded, results.values()):  # beside each: the precision of acting on every held-out meme
        labels = binary_oof(result)[1]
        rows = _policy_scores(policy)
        for head, row in rows.items():
            held_out = list((labels.get(head) or {}).values())
            row["positive_rate"] = float(np.mean(held_out)) if held_out else None
        per_fold.append(rows)
    return {
        "name": recorded[0]["name"],
        "targets": recorded[0].get("targets"),
        "rule": recorded[0]["rule"],
        "metrics": prefixed_mean_std(_every_fold(per_fold), "cv"),
        "folds": len(recorded),
    }


def policy_markdown(result: dict[str, Any], heads: list[str]) -> list[str]:
    """Per culture and action, the folds' thresholds and the held-out precision / recall at them (means over folds)."""
    policy = result.get("policy")
    if not policy:
        return []
    metrics = policy["metrics"]
    cell = functools.partial(_mean_std_cell, metrics)
    targets = ", ".join(f"{a} at {name} ≥ {goal}" for a, t in (policy.get("targets") or {}).items() for name, goal in (t or {}).items())
    lines = ["", f"Policy **{shown(policy['name'])}** ({shown(targets)}) on the held-out folds, at each fold's own thresholds (means over folds):", ""]
    lines += [
        "| head | action | threshold | reached on selection | held-out precision | held-out recall | folds unreachable | positive rate (precision of acting on all) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for head in heads:
        for action in POLICY_ACTIONS:
            share = metrics.get(f"cv/{head}/{action}_unreachable_mean")
            if share is None:
                continue
            names = ("threshold", "reached", "precision", "recall")
            unreachable = round(share * policy["folds"])
            cells = " | ".join(cell(head, f"{action}_{n}") for n in names)
            lines.append(f"| {head} | {action} | {cells} | {unreachable} of {policy['folds']} | {cell(head, 'positive_rate')} |")
    lines += ["", f"Rule: {shown(policy['rule'])}, each fold's own; a target a fold's selection split cannot meet is never taken there."]
    return lines


def _mean_std_cell(metrics: Mapping[str, float | None], head: str, name: str) -> str:
    """`mean ± std` over folds of one head's score, or — where no fold defined it."""
    mean, std = metrics.get(f"cv/{head}/{name}_mean"), metrics.get(f"cv/{head}/{name}_std")
    return "—" if mean is None or mean != mean else f"{mean:.3f} ± {std:.3f}"


VOTE_SCORES = ("cross_entropy", "jsd")


def _vote_scores(recorded: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Head → the held-out fold's soft scores of the run and the constant (`cross_entropy`, `constant_cross_entropy` …)
    and the run's Pearson r; `disagreement` → the two spreads and their correlations."""
    rows: dict[str, dict[str, float | None]] = {
        head: {
            **{name: row["model"][name] for name in (*VOTE_SCORES, "pearson")},
            **{f"constant_{name}": row["constant"][name] for name in VOTE_SCORES},
        }
        for head, row in recorded["heads"].items()
    }
    spread = recorded.get("disagreement")
    if spread:
        rows["disagreement"] = {k: spread[k] for k in ("predicted_spread", "annotated_spread", "pearson", "spearman")}
    return rows


def summarise_votes(results: Mapping[int, FoldResult]) -> dict[str, Any] | None:
    """Mean ± sample std over folds of each culture's held-out soft scores beside the constant baseline's, and of the
    cultures' disagreement; None unless every fold's held-out memes carried votes."""
    recorded = [r.get("votes") or {} for r in results.values()]
    if not recorded or not all(r.get("heads") for r in recorded):
        return None
    return {"rule": recorded[0]["rule"], "metrics": prefixed_mean_std(_every_fold([_vote_scores(r) for r in recorded]), "cv")}


def votes_markdown(result: dict[str, Any], heads: list[str]) -> list[str]:
    """Per culture, the held-out folds against their annotators' votes beside the constant baseline, and the cultures'
    disagreement predicted against the annotated (means over folds)."""
    votes = result.get("votes")
    if not votes:
        return []
    metrics = votes["metrics"]
    cell = functools.partial(_mean_std_cell, metrics)
    lines = ["", "Against the annotators' votes on the held-out folds (lower cross-entropy and JSD: closer; means over folds):", ""]
    lines += ["| head | cross-entropy | constant | JSD | constant | r(p, vote share) |", "|---|---|---|---|---|---|"]
    for head in [h for h in heads if f"cv/{h}/cross_entropy_mean" in metrics]:
        names = ("cross_entropy", "constant_cross_entropy", "jsd", "constant_jsd", "pearson")
        lines.append(f"| {head} | " + " | ".join(cell(head, n) for n in names) + " |")
    if "cv/disagreement/annotated_spread_mean" in metrics:
        lines += [
            "",
            f"Cultures' disagreement per meme: predicted spread {cell('disagreement', 'predicted_spread')}, annotated "
            f"{cell('disagreement', 'annotated_spread')}; Pearson r {cell('disagreement', 'pearson')}, Spearman ρ "
            f"{cell('disagreement', 'spearman')}.",
        ]
    lines += ["", f"Rule: {shown(votes['rule'])}, each fold's own."]  # a shared file's words
    return lines


def abstention_markdown(result: dict[str, Any], heads: list[str]) -> list[str]:
    """Per culture, the held-out folds' AURC in the disagreement order beside a random and the oracle order's."""
    abstention = result.get("abstention")
    if not abstention:
        return []
    cell = functools.partial(_mean_std_cell, abstention["metrics"])
    lines = ["", "Abstention on the held-out folds: AURC (lower: the disputed memes are the wrong ones), means over folds:", ""]
    lines += ["| head | disagreement order | random order | oracle |", "|---|---|---|---|"]
    for head in [*heads, "mean"]:
        lines.append(f"| {head} | {cell(head, 'aurc')} | {cell(head, 'aurc_random')} | {cell(head, 'aurc_oracle')} |")
    lines += ["", f"Rule: {shown(abstention['rule'])}, each fold's own."]  # a shared file's words
    return lines


def calibration_markdown(result: dict[str, Any], heads: list[str]) -> list[str]:
    """The held-out folds' ECE, Brier score and log-loss before → after each fold's temperature (means over folds)."""
    calibration = result.get("calibration")
    if not calibration:
        return []
    metrics = calibration["metrics"]

    def cell(head: str, name: str) -> str:
        before, after = metrics.get(f"cv/{head}/{name}_before_mean"), metrics.get(f"cv/{head}/{name}_after_mean")
        return "—" if before is None or after is None else f"{before:.3f} → {after:.3f}"

    lines = ["", "Calibration of the held-out folds, before → after each fold's temperature (means over folds):", ""]
    lines += ["| head | ECE | Brier | log-loss | temperature | ECE after Platt / isotonic (reported, not applied) |", "|---|---|---|---|---|---|"]
    for head in heads:
        mean, std = metrics.get(f"cv/{head}/temperature_mean"), metrics.get(f"cv/{head}/temperature_std")
        temperature = "—" if mean is None else f"{mean:.3f} ± {std:.3f}"
        others = " / ".join("—" if (v := metrics.get(f"cv/{head}/ece_{m}_mean")) is None else f"{v:.3f}" for m in ("platt", "isotonic"))
        lines.append(f"| {head} | {cell(head, 'ece')} | {cell(head, 'brier')} | {cell(head, 'log_loss')} | {temperature} | {others} |")
    lines += ["", f"Rule: {shown(calibration['rule'])}, each fold's own; ECE over {shown(calibration['bins'])}."]  # a shared file's words
    return lines


def summarise(results: Mapping[int, FoldResult], oof: PooledOOF) -> dict[str, Any]:
    """Mean ± sample std over folds of the held-out folds' metrics, plus pooled out-of-fold scores."""
    summary = prefixed_mean_std(_per_head_metric([r["held_out"] for r in results.values()]), "cv")
    # macro-F1 (and accuracy) at the threshold each fold's selection split chose, applied once to its held-out fold
    thresholds = [_threshold_scores(r) for r in results.values()]
    if all(thresholds):
        summary.update(prefixed_mean_std(_per_head_metric(thresholds), "cv"))
    # the selection set's scores of the selected weights: what a hyperparameter sweep may be scored by
    per_selection = _per_head_metric([r.get("selection_scores") or {} for r in results.values()])
    if all(len(v) == len(results) for v in per_selection.values()):
        summary.update(prefixed_mean_std(per_selection, "cv_selection"))
    alignment = alignment_matrix(oof.probs, oof.labels)
    rule = rule_of(next(iter(results.values())))
    return {
        "selection": {"rule": rule, "description": RULES[rule]},
        "metrics": summary,
        "baselines": summarise_baselines(results),
        "calibration": summarise_calibration(results),
        "abstention": summarise_abstention(results),
        "votes": summarise_votes(results),
        "policy": summarise_policy(results),
        "pooled_oof_auroc": {head: row[head] for head, row in alignment.items() if head in row},  # own labels, all folds pooled
        "alignment": alignment,
        "oof_samples": oof.samples,
        "ids_in_two_folds": oof.ids_in_two_folds,
    }


def summarise_baselines(results: Mapping[int, FoldResult]) -> dict[str, Any]:
    """Each baseline every fold measured: its name and rule, and mean ± std over the held-out folds per head and metric
    (`cv/{head}/{metric}_mean`), the same folds and memes as the model's."""
    rows = [r.get("baselines") or {} for r in results.values()]
    kinds = [kind for kind in rows[0] if all(kind in row for row in rows)] if rows else []
    return {
        kind: {
            "name": rows[0][kind]["name"],
            "rule": rows[0][kind]["rule"],
            "metrics": prefixed_mean_std(_per_head_metric([row[kind].get("test") or {} for row in rows]), "cv"),
        }
        for kind in kinds
    }


def baselines_markdown(result: dict[str, Any], heads: list[str]) -> list[str]:
    """The held-out AUROC of the model beside each baseline's (mean ± std over folds), and the model's margin over the
    best baseline's mean (negative: the model loses to it)."""
    baselines = result.get("baselines") or {}
    if not baselines:
        return []
    cell = lambda m, h: (m.get(f"cv/{h}/auroc_mean"), m.get(f"cv/{h}/auroc_std"))  # noqa: E731
    lines = ["", "Held-out AUROC beside the baselines on the same folds and memes (mean ± sample std over folds):", ""]
    lines += [
        f"| head | model | {' | '.join(LABELS.get(k, k) for k in baselines)} | model − best baseline |",
        "|---|" + "---|" * (len(baselines) + 2),
    ]
    for head in heads:
        model = cell(result["metrics"], head)
        others = [cell(b["metrics"], head) for b in baselines.values()]
        text = [f"{m:.3f} ± {s:.3f}" if m is not None else "—" for m, s in [model, *others]]
        means = [m for m, _ in others if m is not None]
        delta = f"{model[0] - max(means):+.3f}" if model[0] is not None and means else "—"
        lines.append(f"| {head} | " + " | ".join(text) + f" | {delta} |")
    lines += [""] + [f"- {shown(kind)}: {shown(b['name'])}; {shown(b['rule'])}." for kind, b in baselines.items()]  # a shared file's words
    return lines


# The per-head columns of cv_report.md: metric key → heading. Accuracy at 0.5 is shown beside the majority-class rate
# (an accuracy no higher carries no information) and beside macro-F1 at a threshold the selection split chose.
CV_COLUMNS = {
    "auroc": "AUROC",
    "acc": "acc",
    "majority": "majority",
    "f1": "F1",
    "macro_f1_at_val_threshold": "macro-F1 @ sel. thr.",
}
CV_COLUMNS_NOTE = (
    "acc and F1: decisions at P(hate) ≥ 0.5; majority: the accuracy of always answering the held-out fold's most frequent "
    "class; macro-F1 @ sel. thr.: at the threshold that maximised macro-F1 on the fold's selection split, applied once to "
    "its held-out fold (— where a fold has no selection split)."
)


def cv_markdown(name: str, folds: list[int], problems: list[str], result: dict[str, Any]) -> str:
    """`cv_report.md`: the rule, mean ± std per head, pooled out-of-fold AUROC, the alignment table and figures."""
    heads = sorted({k.split("/")[1] for k in result["metrics"] if k.startswith("cv/")} - {"mean"}) + ["mean"]
    lines = [f"# Cross-validation: {name}", "", f"Folds used: {sorted(folds)}; out-of-fold samples: {result['oof_samples']}."]
    lines += ["", f"Selection rule: **{result['selection']['rule']}** — {result['selection']['description']}."]
    lines += ["Every number below is the held-out folds' single test pass (mean ± sample std over folds)."]
    lines += [f"- **problem**: {p}" for p in problems] + [""]
    metrics = result["metrics"]
    lines += [f"| head | {' | '.join(CV_COLUMNS.values())} | pooled OOF AUROC |", "|---|" + "---|" * (len(CV_COLUMNS) + 1)]
    for head in heads:
        cells = [
            f"{metrics[f'cv/{head}/{m}_mean']:.3f} ± {metrics[f'cv/{head}/{m}_std']:.3f}" if f"cv/{head}/{m}_mean" in metrics else "—"
            for m in CV_COLUMNS
        ]
        pooled = result["pooled_oof_auroc"].get(head)
        lines.append(f"| {head} | " + " | ".join(cells) + f" | {'' if pooled is None else f'{pooled:.3f}'} |")
    lines += ["", CV_COLUMNS_NOTE]
    lines += baselines_markdown(result, heads)
    lines += calibration_markdown(result, heads)
    lines += abstention_markdown(result, heads)
    lines += votes_markdown(result, heads)
    lines += policy_markdown(result, heads)
    if not result["alignment"]:
        return "\n".join([*lines, "", "No binary heads: no pooled ROC or alignment matrix.", ""])
    lines += ["", f"Alignment (AUROC of each head's scores against each culture's labels; {BEST} = best culture; no test):", ""]
    lines += alignment_table(result["alignment"], {head: BEST for head in result["alignment"]})
    lines += ["", "![ROC](roc_oof.png)", "", "![alignment](alignment.png)", ""]
    if result.get("calibration"):  # the report writes it where every fold recorded its map
        lines += ["![reliability before and after each fold's own map](reliability_oof.png)", ""]
    return "\n".join(lines)

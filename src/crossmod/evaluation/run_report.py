"""What `evaluate.py` reports of each run: its scores on the memes it was scored on, and the summary.md text.

A run's predictions arrive as rows (one per meme, `<head>_probability` for binary heads and
`<head>_probabilities` for the others) beside the memes' records; every score here is computed from
those two: metrics per head, the culture alignment matrix, and the sections a dataset asks for (MHC
functional tests, ToxicTags stages, MemeBridge sentiment/emotion).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from crossmod.data.heads import Head
from crossmod.evaluation.alignment import alignment_matrix, alignment_table
from crossmod.evaluation.baselines import LABELS
from crossmod.evaluation.functional import functional_markdown, functional_report
from crossmod.evaluation.metrics import head_scores
from crossmod.evaluation.summary import shown
from crossmod.evaluation.task_metrics import performance_score, subset_rule_accuracy, toxictags_stages

Rows = list[dict[str, Any]]
Heads = dict[str, Head]


@dataclass
class RunScores:
    """One run's scores: `metrics[head]`, the alignment matrix, the binary scores and labels it was computed
    from (head → id → value, for ROC curves) and the dataset's own sections (`mhc`, `toxictags`, `memebridge`)."""

    metrics: dict[str, dict[str, float]]
    alignment: dict[str, dict[str, float]]
    probs: dict[str, dict[str, float]]
    labels: dict[str, dict[str, int]]
    sections: dict[str, Any] = field(default_factory=dict)


def functionality_figure(run: str) -> str:
    """File name of a run's functional-test bar chart in the report folder."""
    return f"functionalities-{run.replace('/', '_')}.png"


def _labels(records: Rows, head: Head) -> torch.Tensor:
    return head.labels([r["labels"].get(head.name) for r in records])


def _probs(rows: Rows, head: Head) -> torch.Tensor:
    key = f"{head.name}_probability" if head.is_binary else f"{head.name}_probabilities"
    return torch.tensor([r[key] for r in rows], dtype=torch.float32)


def score_run(rows: Rows, records: Rows, model_heads: Heads, data_heads: Heads, threshold: float) -> RunScores:
    """Scores of one run's predictions `rows` on `records` (same order): heads the data labels, binary heads
    against every binary culture of the data, and the dataset sections."""
    scores = {}
    for name, head in model_heads.items():
        if name in data_heads:
            scores[name] = head_scores(_probs(rows, head), _labels(records, head), head)
    binary_model = [h for h, head in model_heads.items() if head.is_binary]
    binary_data = [h for h, head in data_heads.items() if head.is_binary]
    ids = [r["id"] for r in records]
    probs = {h: dict(zip(ids, _probs(rows, model_heads[h]).tolist())) for h in binary_model}
    labels = {h: {i: r["labels"][h] for i, r in zip(ids, records) if r["labels"].get(h) is not None} for h in binary_data}
    matrix = alignment_matrix(probs, labels) if probs and labels else {}
    sections = dataset_sections(model_heads, rows, records, data_heads, threshold)
    calibrated = calibration_section(rows, records, model_heads, data_heads)
    if calibrated:
        sections["calibration"] = calibrated
    return RunScores(scores, matrix, probs, labels, sections)


def calibration_section(rows: Rows, records: Rows, model_heads: Heads, data_heads: Heads) -> dict[str, Any] | None:
    """Per binary head the scored memes' ECE, Brier score and log-loss before and after the run's calibration map (the
    rows' `<head>_probability_calibrated`), over the memes the data labels; None where no head has a map."""
    from crossmod.evaluation.calibration import calibration_scores

    heads = {}
    for name, head in model_heads.items():
        key = f"{name}_probability_calibrated"
        if not head.is_binary or name not in data_heads or not rows or key not in rows[0]:
            continue
        labelled = [(r["labels"][name], row) for r, row in zip(records, rows) if r["labels"].get(name) is not None]
        if labelled:
            labels = [y for y, _ in labelled]
            before = calibration_scores(labels, [row[f"{name}_probability"] for _, row in labelled])
            heads[name] = {"before": before, "after": calibration_scores(labels, [row[key] for _, row in labelled])}
    if not heads:
        return None
    rule = "the run's calibration map, fitted on its selection split, applied once to these memes"
    return {"rule": rule, "heads": heads}


def dataset_sections(heads: Heads, rows: Rows, records: Rows, data_heads: Heads, threshold: float) -> dict[str, Any]:
    """The sections a dataset's memes call for: `mhc` (functional tests), `toxictags`, `memebridge`."""
    extra: dict[str, Any] = {}
    if records and "functionality" in records[0].get("meta", {}):
        head = "hateful" if "hateful" in heads else next(h for h, head in heads.items() if head.is_binary)
        extra["mhc"] = functional_report(
            {
                "lang": r["lang"],
                "label": r["labels"]["hateful"],
                "prediction": int(row[f"{head}_probability"] >= threshold),
                "meta": r["meta"],
            }
            for r, row in zip(records, rows)
            if r["labels"].get("hateful") is not None
        )
    if {"toxic", "toxic_type"} <= set(heads) & set(data_heads):
        extra["toxictags"] = toxictags_stages(
            _labels(records, heads["toxic"]).numpy(),
            _probs(rows, heads["toxic"]).numpy(),
            _labels(records, heads["toxic_type"]).numpy(),
            _probs(rows, heads["toxic_type"]).numpy(),
            threshold,
        )
    if {"sentiment", "emotion"} <= set(heads) & set(data_heads):
        sentiment = _labels(records, heads["sentiment"]).numpy()
        known = sentiment >= 0
        acc_sent = float(np.mean(_probs(rows, heads["sentiment"]).numpy().argmax(1)[known] == sentiment[known]))
        emotion = _labels(records, heads["emotion"]).numpy()
        labelled = emotion[:, 0] >= 0
        acc_emo = subset_rule_accuracy(emotion[labelled], _probs(rows, heads["emotion"]).numpy()[labelled] >= threshold)
        extra["memebridge"] = {"acc_sent": acc_sent, "acc_emo_subset": acc_emo, **performance_score(acc_sent, acc_emo)}
    return extra


def _score(value: float | None) -> str:
    return "—" if value is None or value != value else f"{value:.3f}"


def summary_markdown(report: dict[str, Any], figures: Collection[str]) -> str:
    """summary.md of an evaluation report; `figures` names the report-level PNGs present (alignment.png, roc.png)."""
    lines = [f"# Evaluation on {report['dataset']} ({report['items']} items, {len(report['runs'])} run(s))", ""]
    for name, entry in report["runs"].items():
        baselines = entry.get("baselines") or {}
        columns = "".join(f" {LABELS.get(kind, kind)} AUROC |" for kind in baselines)
        lines += [
            f"## {shown(name)}",
            "",
            *split_lines(entry),
            "",
            f"| head | AUROC | acc | F1 |{columns}",
            "|---|---|---|---|" + "---|" * len(baselines),
        ]
        for head, s in entry["metrics"].items():
            cells = "".join(f" {_score(b['test'].get(head, {}).get('auroc'))} |" for b in baselines.values())
            lines.append(f"| {shown(head)} | {s['auroc']:.3f} | {s['acc']:.3f} | {s['f1']:.3f} |{cells}")
        lines += (
            ["", *(f"{LABELS.get(k, k)}: {shown(b['name'])}; {shown(b['rule'])} (measured by the run on these memes)." for k, b in baselines.items())]
            if baselines
            else []
        )
        for key in ("toxictags", "memebridge"):
            if key in entry:
                lines += [
                    "",
                    f"{key}: " + ", ".join(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}" for k, v in entry[key].items()),
                ]
        if "calibration" in entry:
            lines += ["", "| head | ECE before → after | Brier before → after | log-loss before → after |", "|---|---|---|---|"]
            for head, row in entry["calibration"]["heads"].items():
                cells = " | ".join(f"{_score(row['before'][k])} → {_score(row['after'][k])}" for k in ("ece", "brier", "log_loss"))
                lines.append(f"| {shown(head)} | {cells} |")
            first = next(iter(entry["calibration"]["heads"].values()))["before"]
            lines += ["", f"Calibration: {shown(entry['calibration']['rule'])}; ECE over {shown(first['bins'])}."]
        if "mhc" in entry:
            lines += ["", functional_markdown(entry["mhc"], functionality_figure(name))]
        lines.append("")
    if "alignment" in report:
        mean, marks = report["alignment"]["mean"], report["alignment"]["markers"]
        lines += [
            f"## Culture alignment (AUROC of each head's scores against each culture's labels; mean over {report['alignment']['runs']} run(s))",
            "",
            *alignment_table(mean, {head: marks.get(head, "") or "†" for head in mean}),
        ]
        alignment = report["alignment"]
        # reports written before the exact test carry no "test": their markers came from scipy's ranksums
        test = alignment.get("test", "one-sided Wilcoxon rank-sum (normal approximation, scipy ranksums)")
        note = f" {alignment['note']}" if alignment.get("note") else ""
        lines += [
            "",
            f"† best culture; `*`/`**`: best > lowest (/ and > second best), {test} over runs, p < {alignment.get('alpha', 0.05):g}.{note}",
            "",
        ]
        if "alignment.png" in figures:
            lines += ["![alignment](alignment.png)", ""]
    if "roc.png" in figures:
        lines += ["![ROC](roc.png)", ""]
    return "\n".join(lines)


def split_lines(entry: dict[str, Any]) -> list[str]:
    """What a run was scored on and which rule chose its weights, as the summary states them."""
    split, selection = entry["split"], entry.get("selection")
    lines = [f"Scored on: {split['scored']} ({split['items']} memes; split={split['requested']})."]
    if entry.get("scored_by"):
        lines.append(f"Scores from: {entry['scored_by']}.")
    if selection:
        monitor = f", monitor {selection['monitor']}" if selection.get("monitor") else ""
        lines.append(f"Weights: rule `{shown(selection['rule'])}` — {shown(selection['description'])}{shown(monitor)}.")
        if selection.get("note"):
            lines.append(f"Weights given: {shown(selection['weights'])}, {shown(selection['note'])}.")
    else:
        lines.append("Weights: selection rule unknown (no metrics.json beside these weights).")
    if split.get("warning"):
        lines.append(f"**Warning:** {split['warning']}")
    return lines

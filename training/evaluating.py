"""Evaluation reports for trained runs or exported cultures on any dataset (what `evaluate.py` runs)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import ranksums

from datamodules.heads import Head
from evaluation.alignment import alignment_matrix
from evaluation.functional import functional_markdown, functional_report, functionality_bars
from evaluation.metrics import head_scores
from evaluation.plots import alignment_heatmap, roc_figure
from evaluation.task_metrics import performance_score, subset_rule_accuracy, toxictags_stages
from training.predicting import predict, write_predictions
from training.scored_splits import ScoredSplit


def load_models(ckpt: Path) -> list[tuple[str, Any]]:
    """(name, model) for a run dir, a .ckpt, an exported culture folder, or every run under a folder."""
    from models.module import MemeClassifier
    from training.artifacts import load_culture, run_model

    if ckpt.is_file():
        return [(ckpt.stem, MemeClassifier.load_from_checkpoint(ckpt, map_location="cpu").eval())]
    if (ckpt / "culture_card.json").is_file():
        return [(ckpt.name, load_culture(ckpt)[0])]
    if (ckpt / "metrics.json").is_file():
        return [(ckpt.name, run_model(ckpt)[0])]
    runs = sorted(p.parent for p in ckpt.rglob("metrics.json"))
    if not runs:
        raise FileNotFoundError(f"{ckpt}: no run (metrics.json), checkpoint or exported culture folder")
    return [(str(run.relative_to(ckpt)), run_model(run)[0]) for run in runs]


def _labels(records: list[dict[str, Any]], head: str, spec: dict[str, Any]) -> torch.Tensor:
    return Head.from_spec(head, spec).labels([r["labels"].get(head) for r in records])


def _probs(rows: list[dict[str, Any]], head: str, spec: dict[str, Any]) -> torch.Tensor:
    key = f"{head}_probability" if spec["kind"] == "binary" else f"{head}_probabilities"
    return torch.tensor([r[key] for r in rows], dtype=torch.float32)


def markers(matrices: list[dict[str, dict[str, float]]], alpha: float = 0.05) -> dict[str, str]:
    """Per model head: `*` if its best culture beats the lowest over runs (one-sided rank-sum, p < alpha),
    `**` if it also beats the second best; needs several runs (seeds or folds)."""
    if len(matrices) < 2:
        return {}
    result = {}
    for head in matrices[0]:
        values = {c: np.array([m[head][c] for m in matrices]) for c in matrices[0][head]}
        ranked = sorted(values, key=lambda c: -np.nanmean(values[c]))
        best, second, lowest = ranked[0], ranked[1], ranked[-1]
        p_low = ranksums(values[best], values[lowest], alternative="greater").pvalue
        p_second = ranksums(values[best], values[second], alternative="greater").pvalue
        result[head] = "**" if p_low < alpha and p_second < alpha else "*" if p_low < alpha else ""
    return result


def evaluate(
    models: list[tuple[str, Any]],
    scored: Mapping[str, ScoredSplit],
    data_heads: dict[str, dict[str, Any]],
    out: Path,
    batch_size: int,
    threshold: float,
    dataset: str,
) -> dict[str, Any]:
    """Score each run on its own memes (`scored[name]`: a fold run's held-out fold, or a split) and write
    report.json, summary.md, per-run predictions and the figures into `out`."""
    missing = [name for name, _ in models if name not in scored]
    if missing:
        raise KeyError(f"no memes to score for run(s) {missing} (given for {sorted(scored)})")
    out.mkdir(parents=True, exist_ok=True)
    scored_ids = {r["id"] for name, _ in models for r in scored[name].records}
    report: dict[str, Any] = {"dataset": dataset, "items": len(scored_ids), "runs": {}}
    matrices = []
    for name, model in models:
        records = scored[name].records
        rows = predict(model, records, batch_size, threshold)
        write_predictions(rows, out / "predictions" / f"{name.replace('/', '_')}.csv")
        scores = {}
        for head, spec in model.heads_spec.items():
            if head in data_heads:
                scores[head] = head_scores(_probs(rows, head, spec), _labels(records, head, spec), Head.from_spec(head, spec))
        binary_model = [h for h, s in model.heads_spec.items() if s["kind"] == "binary"]
        binary_data = [h for h, s in data_heads.items() if s["kind"] == "binary"]
        ids = [r["id"] for r in records]
        probs = {h: dict(zip(ids, _probs(rows, h, model.heads_spec[h]).tolist())) for h in binary_model}
        labels = {h: {i: r["labels"][h] for i, r in zip(ids, records) if r["labels"].get(h) is not None} for h in binary_data}
        matrix = alignment_matrix(probs, labels) if probs and labels else {}
        matrices.append(matrix)
        entry: dict[str, Any] = {
            "split": scored[name].describe(),
            "selection": scored[name].selection,
            "metrics": scores,
            "alignment": matrix,
        }
        entry.update(_dataset_reports(model, rows, records, data_heads, threshold, out, name))
        report["runs"][name] = entry
        if matrix and name == models[0][0]:
            roc = {
                h: (np.array([labels[h][i] for i in labels[h]]), np.array([probs[h][i] for i in labels[h]]))
                for h in binary_model
                if h in labels
            }
            if roc:
                roc_figure(roc, out / "roc.png", f"{dataset}: ROC per head")
            alignment_heatmap(matrix, out / "alignment.png", f"{dataset}: culture alignment")
    if any(matrices):
        mean = {h: {c: float(np.nanmean([m[h][c] for m in matrices])) for c in matrices[0][h]} for h in matrices[0]}
        report["alignment"] = {"mean": mean, "markers": markers(matrices), "runs": len(matrices)}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=float))
    (out / "summary.md").write_text(summary_markdown(report, out))
    return report


def _dataset_reports(
    model: Any,
    rows: list[dict[str, Any]],
    records: list[dict[str, Any]],
    data_heads: dict[str, dict[str, Any]],
    threshold: float,
    out: Path,
    name: str,
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    heads = model.heads_spec
    if records and "functionality" in records[0].get("meta", {}):
        head = "hateful" if "hateful" in heads else next(h for h, s in heads.items() if s["kind"] == "binary")
        functional = functional_report(
            {
                "lang": r["lang"],
                "label": r["labels"]["hateful"],
                "prediction": int(row[f"{head}_probability"] >= threshold),
                "meta": r["meta"],
            }
            for r, row in zip(records, rows)
            if r["labels"].get("hateful") is not None
        )
        functionality_bars(functional, out / f"functionalities-{name.replace('/', '_')}.png")
        extra["mhc"] = functional
    if {"toxic", "toxic_type"} <= set(heads) & set(data_heads):
        extra["toxictags"] = toxictags_stages(
            _labels(records, "toxic", heads["toxic"]).numpy(),
            _probs(rows, "toxic", heads["toxic"]).numpy(),
            _labels(records, "toxic_type", heads["toxic_type"]).numpy(),
            _probs(rows, "toxic_type", heads["toxic_type"]).numpy(),
            threshold,
        )
    if {"sentiment", "emotion"} <= set(heads) & set(data_heads):
        sentiment = _labels(records, "sentiment", heads["sentiment"]).numpy()
        known = sentiment >= 0
        acc_sent = float(np.mean(_probs(rows, "sentiment", heads["sentiment"]).numpy().argmax(1)[known] == sentiment[known]))
        emotion = _labels(records, "emotion", heads["emotion"]).numpy()
        labelled = emotion[:, 0] >= 0
        acc_emo = subset_rule_accuracy(emotion[labelled], _probs(rows, "emotion", heads["emotion"]).numpy()[labelled] >= threshold)
        extra["memebridge"] = {"acc_sent": acc_sent, "acc_emo_subset": acc_emo, **performance_score(acc_sent, acc_emo)}
    return extra


def summary_markdown(report: dict[str, Any], out: Path) -> str:
    lines = [f"# Evaluation on {report['dataset']} ({report['items']} items, {len(report['runs'])} run(s))", ""]
    for name, entry in report["runs"].items():
        lines += [f"## {name}", "", *_split_lines(entry), "", "| head | AUROC | acc | F1 |", "|---|---|---|---|"]
        for head, s in entry["metrics"].items():
            lines.append(f"| {head} | {s['auroc']:.3f} | {s['acc']:.3f} | {s['f1']:.3f} |")
        for key in ("toxictags", "memebridge"):
            if key in entry:
                lines += [
                    "",
                    f"{key}: " + ", ".join(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}" for k, v in entry[key].items()),
                ]
        if "mhc" in entry:
            lines += ["", functional_markdown(entry["mhc"], f"functionalities-{name.replace('/', '_')}.png")]
        lines.append("")
    if "alignment" in report:
        mean, marks = report["alignment"]["mean"], report["alignment"]["markers"]
        cultures = list(next(iter(mean.values())))
        lines += [
            f"## Culture alignment (AUROC of each head's scores against each culture's labels; mean over {report['alignment']['runs']} run(s))",
            "",
            "| head \\ labels | " + " | ".join(cultures) + " |",
            "|---|" + "---|" * len(cultures),
        ]
        for head, row in mean.items():
            best = max(row, key=lambda c: -1 if math.isnan(row[c]) else row[c])
            lines.append(
                f"| {head} | " + " | ".join(f"{row[c]:.3f}" + (marks.get(head, "") or "†" if c == best else "") for c in cultures) + " |"
            )
        lines += ["", "† best culture; `*`/`**`: best > lowest (/ and > second best), one-sided Wilcoxon rank-sum over runs, p < .05.", ""]
        if (out / "alignment.png").is_file():
            lines += ["![alignment](alignment.png)", ""]
    if (out / "roc.png").is_file():
        lines += ["![ROC](roc.png)", ""]
    return "\n".join(lines)


def _split_lines(entry: dict[str, Any]) -> list[str]:
    """What a run was scored on and which rule chose its weights, as the summary states them."""
    split, selection = entry["split"], entry.get("selection")
    lines = [f"Scored on: {split['scored']} ({split['items']} memes; split={split['requested']})."]
    if selection:
        monitor = f", monitor {selection['monitor']}" if selection.get("monitor") else ""
        lines.append(f"Weights: rule `{selection['rule']}` — {selection['description']}{monitor}.")
        if selection.get("note"):
            lines.append(f"Weights given: {selection['weights']}, {selection['note']}.")
    else:
        lines.append("Weights: selection rule unknown (no metrics.json beside these weights).")
    if split.get("warning"):
        lines.append(f"**Warning:** {split['warning']}")
    return lines

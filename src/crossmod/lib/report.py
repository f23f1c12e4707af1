"""The per-culture table printed at the end of a run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from crossmod.evaluation.metrics import METRIC_LABELS, METRICS, REFERENCE_METRICS


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def culture_table(metrics: dict[str, Any], title: str) -> Table:
    """Rows: heads then the macro mean. Columns: every metric the evaluation defines (crossmod.evaluation.metrics.METRICS)
    for the selected weights, as `val / test`; the label facts (the test memes' majority-class rate: accuracy no better
    carries no information) for test; and macro-F1 at the threshold chosen on val, applied once to test."""
    val, test = metrics["best"].get("val", {}), metrics["best"].get("test", {})
    chosen = metrics.get("selection_threshold") or {}
    at_threshold = {**chosen.get("heads", {}), "mean": chosen.get("mean", {})}
    model_metrics = [m for m in METRICS if m not in REFERENCE_METRICS]
    table = Table(title=title)
    table.add_column("head", justify="left")
    for metric in model_metrics:
        table.add_column(f"{METRIC_LABELS[metric]}\nval / test", justify="right", no_wrap=True)
    for metric in REFERENCE_METRICS:
        table.add_column(f"{METRIC_LABELS[metric]}\ntest", justify="right")
    table.add_column("macro-F1\n@ val thr.\ntest", justify="right", no_wrap=True)
    heads = [h for h in (val or test) if h not in ("mean", "all")] + ["mean"]
    for head in heads:
        pairs = [f"{_fmt(val.get(head, {}).get(m))} / {_fmt(test.get(head, {}).get(m))}" for m in model_metrics]
        facts = [_fmt(test.get(head, {}).get(m)) for m in REFERENCE_METRICS]
        threshold = _fmt(at_threshold.get(head, {}).get("macro_f1_at_val_threshold"))
        table.add_row(head, *pairs, *facts, threshold, style="bold" if head == "mean" else None)
    return table


def print_table(metrics: dict[str, Any], title: str, note: str | None = None) -> None:
    console = Console()
    console.print(culture_table(metrics, title))
    console.print(
        "acc and F1 at P >= 0.5; test majority: the accuracy of always answering the test memes' most frequent class (an acc "
        "no higher carries no information); macro-F1 at the threshold that maximised it on val, applied once to test.",
        soft_wrap=True,
    )
    if note:
        console.print(note, soft_wrap=True)

"""The per-culture table printed at the end of a run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


COLUMNS = ("head", "val AUROC", "val acc", "test AUROC", "test acc", "test majority", "test macro-F1 @ val thr.")


def culture_table(metrics: dict[str, Any], title: str) -> Table:
    """Rows: heads then the macro mean; columns: val/test AUROC and accuracy of the selected weights, the test memes'
    majority-class rate (accuracy no better carries no information) and macro-F1 at the threshold chosen on val."""
    val, test = metrics["best"].get("val", {}), metrics["best"].get("test", {})
    chosen = metrics.get("selection_threshold") or {}
    at_threshold = {**chosen.get("heads", {}), "mean": chosen.get("mean", {})}
    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "head" else "right")
    heads = [h for h in (val or test) if h not in ("mean", "all")] + ["mean"]
    for head in heads:
        row = [
            val.get(head, {}).get("auroc"),
            val.get(head, {}).get("acc"),
            test.get(head, {}).get("auroc"),
            test.get(head, {}).get("acc"),
            test.get(head, {}).get("majority"),
            at_threshold.get(head, {}).get("macro_f1_at_val_threshold"),
        ]
        table.add_row(head, *(_fmt(v) for v in row), style="bold" if head == "mean" else None)
    return table


def print_table(metrics: dict[str, Any], title: str, note: str | None = None) -> None:
    console = Console()
    console.print(culture_table(metrics, title))
    console.print(
        "acc at P >= 0.5; test majority: the accuracy of always answering the test memes' most frequent class (an acc "
        "no higher carries no information); macro-F1 at the threshold that maximised it on val, applied once to test.",
        soft_wrap=True,
    )
    if note:
        console.print(note, soft_wrap=True)

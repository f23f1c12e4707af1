"""The per-culture table printed at the end of a run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def culture_table(metrics: dict[str, Any], title: str) -> Table:
    """Rows: heads then the macro mean; columns: val/test AUROC and accuracy of the selected weights."""
    val, test = metrics["best"].get("val", {}), metrics["best"].get("test", {})
    table = Table(title=title)
    for column in ("head", "val AUROC", "val acc", "test AUROC", "test acc"):
        table.add_column(column, justify="left" if column == "head" else "right")
    heads = [h for h in (val or test) if h not in ("mean", "all")] + ["mean"]
    for head in heads:
        row = [val.get(head, {}).get("auroc"), val.get(head, {}).get("acc"), test.get(head, {}).get("auroc"), test.get(head, {}).get("acc")]
        table.add_row(head, *(_fmt(v) for v in row), style="bold" if head == "mean" else None)
    return table


def print_table(metrics: dict[str, Any], title: str, note: str | None = None) -> None:
    console = Console()
    console.print(culture_table(metrics, title))
    if note:
        console.print(note, soft_wrap=True)

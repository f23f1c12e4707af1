"""Zero-shot runs side by side: `crossmod zeroshot-report runs=[<run dir>,…] [out=comparison.md]`.

Each run is a `crossmod zeroshot …` output directory (or its `zeroshot/` folder); rows are labelled by the
checkpoint's model_type and its folder name. The table is `crossmod.evaluation.zeroshot_comparison`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crossmod.evaluation.zeroshot_comparison import comparison_markdown


def read_summary(run: Path) -> dict[str, Any]:
    """`summary.json` of a zero-shot run directory or its `zeroshot/` folder; a clear error when missing."""
    for candidate in (run / "zeroshot" / "summary.json", run / "summary.json"):
        if candidate.is_file():
            return json.loads(candidate.read_text())
    raise FileNotFoundError(f"{run}: no zeroshot/summary.json (is it a `crossmod zeroshot` run directory?)")


def label(summary: dict[str, Any], taken: set[str]) -> str:
    name = f"{summary.get('model_type') or summary.get('family', '?')} ({Path(str(summary['model'])).name})"
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name} #{n}", n + 1
    taken.add(unique)
    return unique


def comparison(runs: list[Path]) -> str:
    """The markdown table of zero-shot runs side by side, columns in the given order, each labelled once."""
    taken: set[str] = set()
    summaries = {}
    for run in runs:
        summary = read_summary(run)
        summaries[label(summary, taken)] = summary
    return comparison_markdown(summaries)

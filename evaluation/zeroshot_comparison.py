"""Zero-shot runs of several models side by side, the shape of the Multi3Hate study's Tables 4 and 10.

Rows = model × meme language, columns = cultures' labels; each cell is the accuracy's mean ± sample std
over the prompts, and each row's best culture carries that run's Wilcoxon rank-sum marker
(`evaluation.zeroshot_stats`). The numbers are the runs' own (`<run>/zeroshot/summary.json`), not
recomputed here, so the comparison says exactly what each run reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from evaluation.zeroshot_stats import CULTURES, LANGUAGES, ordered


def comparison_markdown(runs: Mapping[str, Mapping[str, Any]], digits: int = 1) -> str:
    """`runs`: model label → a zero-shot summary.json. One block of rows per model, in the given order."""
    if not runs:
        raise ValueError("no zero-shot runs to compare")
    cultures = ordered({c for s in runs.values() for lang in s["accuracy"].values() for c in lang if c not in ("best", "marker")}, CULTURES)
    prompts = {tuple(s["prompts"]) for s in runs.values()}
    header = ["model", "memes", *cultures, "invalid"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, summary in runs.items():
        for i, lang in enumerate(ordered(summary["accuracy"], LANGUAGES)):
            row = summary["accuracy"][lang]
            cells = [_cell(row.get(c), digits) + (row["marker"] if c == row["best"] else "") for c in cultures]
            invalid = f"{summary['invalid']}/{summary['answers']}" if i == 0 else ""
            lines.append("| " + " | ".join([label if i == 0 else "", lang, *cells, invalid]) + " |")
    prompt_text = ", ".join(str(list(p)) for p in sorted(prompts))
    lines += [
        "",
        f"Accuracy (%) per culture's labels, mean ± sample std (ddof=1) over the prompts ({prompt_text}). `*` best > lowest, "
        "`**` best > lowest and > second best (Wilcoxon rank-sum per row, as each run computed it). Invalid answers count as wrong.",
    ]
    return "\n".join(lines) + "\n"


def _cell(cell: Mapping[str, Any] | None, digits: int) -> str:
    if cell is None or cell.get("mean") is None or not math.isfinite(cell["mean"]):
        return "–"
    return f"{100 * cell['mean']:.{digits}f} ± {100 * cell['std']:.{digits}f}"

"""Zero-shot runs of several models side by side, the shape of the Multi3Hate study's Tables 4 and 10.

Rows = model × meme language, columns = cultures' labels; each cell is the accuracy's mean ± sample std
over the prompts, and each row's best culture carries that run's rank-sum marker (`crossmod.evaluation.zeroshot_stats`);
the footer names the test each run used (its summary.json `markers.test`; summaries written before it was
recorded used scipy's `ranksums`, the normal approximation) and repeats any run's note that its prompts were
too few for a marker. The numbers are the runs' own (`<run>/zeroshot/summary.json`), not recomputed here, so
the comparison says exactly what each run reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from crossmod.evaluation.zeroshot_stats import CULTURES, LANGUAGES, ordered

# what a summary.json without `markers.test` used (crossmod before the exact test)
LEGACY_TEST = "one-sided Wilcoxon rank-sum (normal approximation, scipy ranksums)"


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
    test_of = {label: s.get("markers", {}).get("test", LEGACY_TEST) for label, s in runs.items()}
    tests = list(dict.fromkeys(test_of.values()))
    test_text = tests[0] if len(tests) == 1 else "; ".join(f"{label}: {test}" for label, test in test_of.items())
    notes = "".join(f" {label}: {s['markers']['note']}" for label, s in runs.items() if s.get("markers", {}).get("note"))
    lines += [
        "",
        f"Accuracy (%) per culture's labels, mean ± sample std (ddof=1) over the prompts ({prompt_text}). `*` best > lowest, "
        f"`**` best > lowest and > second best ({test_text} over the prompts, per row, as each run computed it).{notes} "
        "Invalid answers count as wrong.",
    ]
    return "\n".join(lines) + "\n"


def _cell(cell: Mapping[str, Any] | None, digits: int) -> str:
    if cell is None or cell.get("mean") is None or not math.isfinite(cell["mean"]):
        return "–"
    return f"{100 * cell['mean']:.{digits}f} ± {100 * cell['std']:.{digits}f}"

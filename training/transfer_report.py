"""The culture-transfer table (Table 11) of a cross-validation folder: every experiment's fold runs, plus zero-shot answers.

Rows: `zero-shot` (a `training.zeroshot` run's answers.csv found under the folder, split by the same
held-out folds), `FT-<culture>` for each single-culture experiment and each multi-head experiment
(its own head per column); columns: every culture's labels of the held-out memes. Writes
`culture_transfer.{json,md,png}`; the folds of every row must hold out the same memes. The table
itself is `evaluation.culture_transfer.fold_transfer`; this module reads the answers and writes the files.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from evaluation.culture_transfer import Answers, FoldResults, fold_transfer, held_out_sets, transfer_document
from evaluation.plots import transfer_heatmap
from evaluation.summary import json_safe


def read_zeroshot_answers(path: Path) -> dict[str, Answers]:
    """Prompt → answers of a zero-shot run's answers.csv (an empty prediction: an unparseable answer)."""
    by_prompt: dict[str, Answers] = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            answers = by_prompt.setdefault(row["prompt"], Answers())
            answers.probability[row["id"]] = float(row["p_hate"])
            answers.decision[row["id"]] = None if row["prediction"] == "" else int(row["prediction"])
    return by_prompt


def transfer_report(experiments: FoldResults, root: Path, out: Path) -> dict[str, Any] | None:
    """`experiments[name][fold]` = fold result. Returns the table (None when there is nothing to compare)."""
    _, held_out = held_out_sets(experiments)
    if not held_out or not all(held_out):
        return None
    zeroshot = sorted(root.rglob("zeroshot/answers.csv"))
    transfer = fold_transfer(experiments, read_zeroshot_answers(zeroshot[-1]) if zeroshot else None)
    if transfer is None:
        return None
    table, diagonal, problems = transfer["table"], transfer["diagonal"], transfer["problems"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "culture_transfer.md").write_text(transfer_document(transfer))
    transfer_heatmap(table, "acc", diagonal, out / "culture_transfer.png", "Accuracy by culture labels (held-out folds)")
    payload = {
        "table": table,
        "diagonal": diagonal,
        "folds": transfer["folds"],
        "zeroshot_answers": str(zeroshot[-1]) if zeroshot else None,
    }
    (out / "culture_transfer.json").write_text(json.dumps(json_safe({**payload, "problems": problems}), indent=1, allow_nan=False))
    return {**payload, "problems": problems}

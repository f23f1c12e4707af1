"""The culture-transfer table (Table 11) of a cross-validation folder: every experiment's fold runs, plus zero-shot answers.

Rows: `zero-shot` (a `crossmod.prompting.zeroshot` run's answers.csv found under the folder, split by the same
held-out folds), `FT-<culture>` for each single-culture experiment and each multi-head experiment
(its own head per column); columns: every culture's labels of the held-out memes. Writes
`culture_transfer.{json,md,png}`; the folds of every row must hold out the same memes. The table
itself is `crossmod.evaluation.culture_transfer.fold_transfer`; this module reads the answers and writes the files.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from crossmod.evaluation.culture_transfer import Answers, FoldResults, fold_transfer, held_out_sets, transfer_document
from crossmod.evaluation.plots import transfer_heatmap
from crossmod.evaluation.summary import json_safe


def read_zeroshot_answers(path: Path) -> dict[str, Answers]:
    """Prompt → answers of a zero-shot run's answers.csv (an empty prediction: an unparseable answer); a row that is
    not what `zeroshot.py` writes stops with the file and row."""
    by_prompt: dict[str, Answers] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row_number, row in enumerate(csv.DictReader(handle), 2):  # row 1 is the header
            try:
                prompt, meme, p_hate, prediction = row["prompt"], row["id"], row["p_hate"], row["prediction"]
                problem = _answer_problem(p_hate, prediction)
            except KeyError as error:
                problem = f"no {error} column"
            if problem:
                raise ValueError(f"{path}, row {row_number}: {problem}; answers.csv is what `crossmod zeroshot` writes: run it again")
            answers = by_prompt.setdefault(prompt, Answers())
            answers.probability[meme] = float(p_hate)
            answers.decision[meme] = None if prediction == "" else int(prediction)
    return by_prompt


def _answer_problem(p_hate: str | None, prediction: str | None) -> str | None:
    """What is wrong with one answer row's numbers (None when nothing)."""
    if prediction not in ("", "0", "1"):
        return f"prediction {prediction!r} is not 0, 1 or empty (an unreadable answer)"
    try:
        probability = float(p_hate)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"p_hate {p_hate!r} is not a number"
    return None if 0.0 <= probability <= 1.0 else f"p_hate {p_hate!r} is not a probability in [0, 1]"


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
        "majority": transfer["majority"],
        "positive_rate": transfer["positive_rate"],
        "diagonal": diagonal,
        "folds": transfer["folds"],
        "policy": transfer["policy"],
        "zeroshot_answers": str(zeroshot[-1]) if zeroshot else None,
    }
    (out / "culture_transfer.json").write_text(json.dumps(json_safe({**payload, "problems": problems}), indent=1, allow_nan=False))
    return {**payload, "problems": problems}

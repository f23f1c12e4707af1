"""The figures a person opens in a run folder: the test memes' ROC curve per head, the culture alignment heatmap
(each head's scores against every culture's labels) and the reliability diagram (one panel per culture, before and
after the temperature metrics.json's `calibration` fitted on val), drawn from the run's own `predictions/test.csv`
after training.

They were W&B media only; now every run has them as PNG beside metrics.json, whatever the logger. Each is rendered in
memory and written through the one writer (`write_file`: atomic, never through a link planted in the run folder).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from crossmod.data.cache_files import write_file

FIGURES = ("roc_test.png", "alignment_test.png", "reliability_test.png")


def write_run_figures(run_dir: Path, label: str) -> list[Path]:
    """The run's figures from its test predictions (none without a test stage or a binary head); the paths written."""
    from crossmod.evaluation.alignment import alignment_matrix, read_predictions
    from crossmod.evaluation.plots import alignment_heatmap, reliability_figure, roc_figure
    from crossmod.evaluation.predictions import labelled_pairs

    predictions = run_dir / "predictions" / "test.csv"
    if not predictions.is_file():
        return []
    probs, labels = read_predictions(predictions)
    pairs = labelled_pairs(probs, labels)
    written = []
    if pairs:
        written.append(write_png(lambda buffer: roc_figure(pairs, buffer, f"{label}: test ROC per head"), run_dir / FIGURES[0]))
    matrix = alignment_matrix(probs, labels) if probs and labels else {}
    if any(value == value for row in matrix.values() for value in row.values()):  # some AUROC defined (NaN != NaN)
        written.append(write_png(lambda buffer: alignment_heatmap(matrix, buffer, f"{label}: test AUROC, head × culture labels"), run_dir / FIGURES[1]))
    calibration = _reliability_curves(run_dir)
    if calibration:
        title = f"{label}: test reliability, before and after the temperature fitted on val"
        written.append(write_png(lambda buffer: reliability_figure(calibration, buffer, title), run_dir / FIGURES[2]))
    return written


def _reliability_curves(run_dir: Path) -> dict[str, dict[str, tuple[object, object]]]:
    """Per head with a calibration map in metrics.json's `calibration`: the test memes' reliability bins before and after it."""
    import json

    from crossmod.evaluation.alignment import read_predictions
    from crossmod.evaluation.calibration import apply_calibrator, calibrator_of, reliability_bins
    from crossmod.evaluation.predictions import labelled_pairs

    metrics = run_dir / "metrics.json"
    calibration = json.loads(metrics.read_text()).get("calibration") if metrics.is_file() else None
    if not calibration:
        return {}
    pairs = labelled_pairs(*read_predictions(run_dir / "predictions" / "test.csv"))
    curves = {}
    for head, row in calibration["heads"].items():
        y, p = pairs[head]
        calibrator = calibrator_of(row)
        before, after = reliability_bins(y, p), reliability_bins(y, apply_calibrator(p, calibrator))
        name = f"T = {row['temperature']:.2f}" if calibrator["method"] == "temperature" else calibrator["method"]
        curves[head] = {"as scored": (before.predicted, before.observed), name: (after.predicted, after.observed)}
    return curves


def write_png(draw: Callable[[io.BytesIO], object], target: Path) -> Path:
    """A figure drawn into memory, then written as the whole of `target` (a planted link there is replaced, not followed)."""
    buffer = io.BytesIO()
    draw(buffer)
    return write_file(target, buffer.getvalue(), "a figure", user_folder=True)

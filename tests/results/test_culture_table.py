"""The per-culture table lists every metric the evaluation defines (crossmod.evaluation.metrics.METRICS), so a metric
added there is shown without touching the table; its numbers are the run's own."""

from __future__ import annotations

import io

from rich.console import Console

from crossmod.evaluation.metrics import METRIC_LABELS, METRICS, REFERENCE_METRICS
from crossmod.results.culture_table import culture_table


def _printed(metrics: dict) -> str:
    out = io.StringIO()
    Console(file=out, width=80).print(culture_table(metrics, "run"))
    return out.getvalue()


def test_every_defined_metric_has_a_column_with_the_runs_numbers():
    val = {"US": {"auroc": 0.91, "acc": 0.82, "f1": 0.73}, "mean": {"auroc": 0.91, "acc": 0.82, "f1": 0.73}}
    test = {
        "US": {"auroc": 0.64, "acc": 0.55, "f1": 0.46, "majority": 0.37},
        "mean": {"auroc": 0.64, "acc": 0.55, "f1": 0.46, "majority": 0.37},
    }
    printed = _printed({"best": {"val": val, "test": test}, "selection_threshold": {"heads": {"US": {"macro_f1_at_val_threshold": 0.28}}}})
    assert set(METRIC_LABELS) == set(METRICS), "a metric without a label has no column"
    for metric in METRICS:
        assert METRIC_LABELS[metric] in printed
        shown = f"{val['US'][metric]:.3f} / {test['US'][metric]:.3f}" if metric not in REFERENCE_METRICS else f"{test['US'][metric]:.3f}"
        assert shown in printed, (metric, printed)
    assert "0.280" in printed and max(len(line) for line in printed.splitlines()) <= 80  # fits a terminal


def test_the_calibration_table_shows_before_and_after_with_the_temperature():
    from crossmod.results.culture_table import calibration_table

    row = {"ece": 0.123, "brier": 0.2, "log_loss": 0.6}
    calibration = {
        "heads": {"US": {"temperature": 1.75, "before": row, "after": {"ece": 0.045, "brier": 0.19, "log_loss": 0.55}}},
        "mean": {"before": row, "after": {"ece": 0.045, "brier": 0.19, "log_loss": 0.55}},
    }
    out = io.StringIO()
    Console(file=out, width=100).print(calibration_table(calibration, "Calibration on the test memes"))
    printed = out.getvalue()
    assert "0.123 → 0.045" in printed and "1.750" in printed and "fitted on val" in printed


def test_the_policy_table_shows_each_threshold_with_its_interval_or_why_there_is_none():
    from crossmod.results.culture_table import policy_table

    act = {"target": "precision", "goal": 0.9, "threshold": 0.8123, "reached": 0.92, "interval": [0.81, 0.97], "hits": 46, "trials": 50,
           "test": {"precision": 0.88, "recall": 0.4}}
    review = {"target": "recall", "goal": 0.95, "why": "the selection split has no hateful meme among its 10"}
    out = io.StringIO()
    Console(file=out, width=160).print(policy_table({"name": "cautious", "heads": {"US": {"act": act, "review": review}}}, "Policy"))
    printed = out.getvalue()
    assert "0.8123" in printed and "0.920 [0.810, 0.970] (46/50)" in printed and "0.880 / 0.400" in printed
    assert "unreachable: the selection split has no hateful meme" in printed and "recall ≥ 0.95" in printed


def test_the_calibration_maps_are_compared_with_the_runs_own_marked(tmp_path):
    """Every map fitted on val shows its test ECE; the run's (calibration=) is starred; older runs show no such table."""
    import numpy as np
    from rich.console import Console

    from crossmod.evaluation.calibration import temperature_on_selection
    from crossmod.results.culture_table import calibration_maps_table

    rng = np.random.default_rng(0)
    p = rng.random(200)
    y = (rng.random(200) < p**2).astype(int)
    heads = temperature_on_selection({"US": (y, p)}, {"US": (y[::-1], p[::-1])}, method="isotonic")
    row = heads["US"]
    calibration = {"method": "isotonic", "heads": heads, "mean": {"compared": row["compared"]}}
    console = Console(record=True, width=100)
    console.print(calibration_maps_table(calibration, "maps"))
    text = console.export_text()
    assert "isotonic *" in text and "platt *" not in text
    assert f"{row['compared']['platt']['ece']:.3f}" in text and f"{row['after']['ece']:.3f}" in text
    assert calibration_maps_table({"heads": {"US": {"after": {}}}, "mean": {}}, "old") is None

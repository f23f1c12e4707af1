"""What train.py returns to a sweeper: the selected weights' validation value, or a clear stop when a sweep job did
not measure it (a single run, e.g. with `trainer.limit_val_batches=0`, has written its results and returns nothing)."""

from __future__ import annotations

import pytest

from crossmod.recipes.train import optimized_value
from crossmod.runtime.user_errors import UserError

METRICS = {"best": {"val": {"mean": {"auroc": 0.81}, "all": {"loss": 0.4}}, "test": {"mean": {"auroc": 0.7}}}}
UNVALIDATED = {"best": {"val": {}, "test": {"mean": {"auroc": 0.7}}}}


def test_the_selected_weights_validation_value_is_returned():
    assert optimized_value(METRICS, "val/mean/auroc") == 0.81
    assert optimized_value(METRICS, "val/loss") == 0.4


def test_an_unmeasured_objective_stops_a_sweep_job_by_name_and_not_a_single_run():
    with pytest.raises(UserError, match="optimized_metric=val/mean/auroc was not measured"):
        optimized_value(UNVALIDATED, "val/mean/auroc", swept=True)
    assert optimized_value(UNVALIDATED, "val/mean/auroc", swept=False) is None

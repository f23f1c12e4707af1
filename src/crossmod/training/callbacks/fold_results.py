"""The cross-validation callback: every validation's per-head metrics, then the fold's result file.

Lightning has no k-fold: each fold is its own process (`fold=k`), and this callback leaves what ties
the folds together afterwards (`crossmod cv-report`): `fold_result.json` in the run directory with
the selection rule, the validation history (the selection set's scores, never the held-out fold's),
the selected epoch, the held-out fold's metrics per head (its single `test` pass), its out-of-fold
predictions and every dataset head's labels of the held-out memes. The history travels in
checkpoints, so a resumed fold keeps its earlier epochs (Lightning saves checkpoints after the other
callbacks' `on_validation_end`, so each checkpoint's history includes its own validation).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import DictConfig, OmegaConf

from crossmod.artifacts.runs import nest
from crossmod.evaluation.abstention import abstention_on_test
from crossmod.evaluation.alignment import read_predictions
from crossmod.evaluation.predictions import read_prediction_columns
from crossmod.evaluation.summary import json_safe
from crossmod.evaluation.thresholds import calibration_on_selection, policy_on_selection, threshold_on_selection
from crossmod.results.baselines import read as read_baselines
from crossmod.results.votes import votes_on_test

FILENAME = "fold_result.json"


def baseline_scores(run_dir: Path) -> dict[str, Any] | None:
    """Each baseline's name, rule and held-out (`test`) and selection (`val`) scores, from the run's baselines.json."""
    measured = read_baselines(run_dir)
    if measured is None:
        return None
    keep = ("name", "rule", "C", "val", "test")
    return {kind: {k: v for k, v in row.items() if k in keep} for kind, row in measured["rows"].items()}


def _floats(metrics: dict[str, Any], stage: str) -> dict[str, float]:
    """One host copy per validation (not per step) of the stage's logged metrics."""
    return {key: float(value) for key, value in metrics.items() if key.startswith(f"{stage}/")}


class FoldResultWriter(L.Callback):
    """Records validation metrics during fit; after `trainer.test` of the held-out fold, writes the fold file.

    Only folds (`fold` set) write a result file; without a fold the history is still kept in checkpoints.
    """

    def __init__(
        self,
        dirpath: str,
        experiment: str,
        fold: int | None,
        num_folds: int | None,
        monitor: str = "val/mean/auroc",
        mode: str = "max",
        predictions: str = "predictions/test.csv",
        calibration: str = "temperature",
        abstention: str = "spread",
        policy: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"FoldResultWriter: mode must be 'max' or 'min', got {mode!r}")
        self.dirpath, self.experiment = Path(dirpath), experiment
        self.calibration, self.abstention = calibration, abstention
        self.policy = OmegaConf.to_container(policy, resolve=True) if isinstance(policy, DictConfig) else policy  # configs/policy/: its thresholds, chosen on the selection split
        self.fold, self.num_folds, self.monitor, self.mode = fold, num_folds, monitor, mode
        self.predictions = self.dirpath / predictions
        self.history: list[dict[str, Any]] = []
        self.selection_scores: dict[str, float] = {}
        self.written: dict[str, Any] | None = None  # the last fold result written: the run's record reuses its votes
        self._stage: str | None = None

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        self._stage = stage  # runs before Lightning restores callback states from a checkpoint

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if trainer.state.fn == TrainerFn.FITTING:
            metrics = _floats(trainer.callback_metrics, "val")
            self.history.append({"epoch": trainer.current_epoch, "step": trainer.global_step, "metrics": metrics})
        elif trainer.state.fn == TrainerFn.VALIDATING:
            self.selection_scores = _floats(trainer.callback_metrics, "val")

    def on_test_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.fold is None:
            return
        datamodule = trainer.datamodule
        labels = datamodule.held_out_labels() if trainer.is_global_zero else {}
        if trainer.is_global_zero:
            final = {"epoch": trainer.current_epoch - 1, "step": trainer.global_step}
            votes = None
            if self.predictions.is_file() and hasattr(datamodule, "stage_records"):  # the held-out memes' annotators' votes
                train = lambda: datamodule.stage_records("train")  # noqa: E731 - read only when the held-out memes have votes
                votes = votes_on_test(read_predictions(self.predictions)[0], train, datamodule.stage_records("test"), module.heads)
            self.write(_floats(trainer.callback_metrics, "test"), datamodule.selection_rule, labels, final, votes)

    def best_entry(self) -> dict[str, Any] | None:
        """The validation the checkpoint callback would keep (first of equals, like ModelCheckpoint)."""
        scored = [e for e in self.history if not math.isnan(e["metrics"].get(self.monitor, math.nan))]
        if not scored:
            return None
        sign = 1 if self.mode == "max" else -1
        return max(scored, key=lambda e: (sign * e["metrics"][self.monitor], -e["step"]))

    def write(
        self, held_out: dict[str, float], rule: str, labels: dict[str, dict[str, Any]], final: dict[str, int], votes: dict[str, Any] | None = None
    ) -> Path:
        """`held_out`: the test pass over the held-out fold; `rule`: what chose the scored weights; `final`: fit's end;
        `votes`: the held-out memes against their annotators' votes (src/crossmod/results/votes.py), where they have them."""
        if not self.predictions.is_file():
            raise FileNotFoundError(f"{self.predictions} is missing: the fold result needs the PredictionWriter callback")
        selected = final if rule == "last" else self.best_entry()
        threshold = threshold_on_selection(self.predictions.parent)
        payload = {
            "experiment": self.experiment,
            "fold": self.fold,
            "num_folds": self.num_folds,
            "selection": {"rule": rule, "monitor": None if rule == "last" else self.monitor, "mode": self.mode},
            "selected_epoch": None if selected is None else selected["epoch"],
            "selected_step": None if selected is None else selected["step"],
            "held_out": nest(held_out, "test"),
            "selection_scores": nest(self.selection_scores, "val"),
            "history": [{**e, "metrics": nest(e["metrics"], "val")} for e in self.history],
            "oof_predictions": read_prediction_columns(self.predictions),
            "held_out_labels": labels,
            # macro-F1 at the threshold the selection split chose (never the held-out fold), beside accuracy at 0.5
            "selection_threshold": threshold,
            # a temperature per head fitted on the selection split, and the held-out fold's ECE, Brier, log-loss before/after
            "calibration": calibration_on_selection(self.predictions.parent, self.calibration),
            # per culture, the held-out fold's AURC when decided least disputed first (the culture heads' disagreement)
            "abstention": abstention_on_test(threshold, read_predictions(self.predictions), self.abstention),
            # the baselines on the same memes (majority, TF-IDF, probe), measured before fit (src/crossmod/results/baselines.py)
            "baselines": baseline_scores(self.dirpath),
            # per culture, each action's threshold chosen on the selection split and the held-out rates at it
            **({"policy": policy_on_selection(self.predictions.parent, self.policy)} if self.policy else {}),
            # the soft metrics per culture beside the constant baseline, and the cultures' disagreement (votes only)
            **({"votes": votes} if votes else {}),
        }
        path = self.dirpath / FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(json_safe(payload), allow_nan=False))
        self.written = payload
        return path

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resuming a fit continues the history; validating a checkpoint must not rewind it."""
        if self._stage == "fit":
            self.history = list(state_dict.get("history", []))

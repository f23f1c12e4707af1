"""W&B extras for the scored checkpoint: summary metrics, per-culture ROC images, a predictions table.

Per-epoch metrics reach W&B through `self.log` like every logger; what a fold is judged by comes from
`trainer.validate` / `trainer.test` of the best checkpoint, so this callback adds it then: summary keys
`best/{stage}/{head}/{metric}`, one ROC image per binary head (`roc/{stage}/{head}`) and the merged
predictions as a `wandb.Table` (`predictions/{stage}`). Does nothing without a `WandbLogger`.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn

from crossmod.evaluation.plots import roc_figure
from crossmod.evaluation.predictions import binary_scores, labelled_pairs, read_prediction_columns

STAGE_OF = {TrainerFn.VALIDATING: "val", TrainerFn.TESTING: "test"}


def _wandb_loggers(trainer: L.Trainer) -> list[WandbLogger]:
    return [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]


class WandbReport(L.Callback):
    def __init__(self, predictions_dir: str, max_table_rows: int = 20000) -> None:
        self.predictions_dir, self.max_table_rows = Path(predictions_dir), max_table_rows

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._report(trainer)

    def on_test_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._report(trainer)

    def _report(self, trainer: L.Trainer) -> None:
        stage = STAGE_OF.get(trainer.state.fn)
        loggers = _wandb_loggers(trainer)
        if stage is None or not loggers or not trainer.is_global_zero:
            return
        summary = {f"best/{key}": float(value) for key, value in trainer.callback_metrics.items() if key.startswith(f"{stage}/")}
        path = self.predictions_dir / f"{stage}.csv"
        rows = []  # the file's rows as written (text cells): the table shows them as they are, binary or not
        if path.is_file():
            with open(path, newline="") as handle:
                rows = list(csv.DictReader(handle))
        for logger in loggers:
            logger.experiment.summary.update(summary)
            if not rows:
                continue
            self._log_roc_images(logger, stage, path)
            table = rows[: self.max_table_rows]
            logger.log_table(key=f"predictions/{stage}", columns=list(table[0]), data=[list(r.values()) for r in table])
            if len(rows) > len(table):
                logger.experiment.summary[f"predictions/{stage}/rows_not_in_table"] = len(rows) - len(table)

    @staticmethod
    def _log_roc_images(logger: WandbLogger, stage: str, path: Path) -> None:
        """One image per binary head; heads with list-valued probabilities (multiclass/multilabel) have no ROC."""
        pairs = labelled_pairs(*binary_scores(read_prediction_columns(path)))
        with tempfile.TemporaryDirectory() as tmp:
            for head, (labels, probs) in sorted(pairs.items()):
                if len(set(labels.tolist())) < 2:
                    continue
                image = roc_figure({head: (labels, probs)}, Path(tmp) / f"{head}.png", f"{stage} ROC: {head}")
                logger.log_image(key=f"roc/{stage}/{head}", images=[str(image)])

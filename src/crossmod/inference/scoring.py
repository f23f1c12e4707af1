"""Scoring memes with a classifier through Lightning's predict loop (what evaluate.py and predict.py run).

The `trainer=` group decides where: device, precision, processes and nodes, as for training. Over several
processes Lightning's predict sampler gives each meme to exactly one rank (no padding duplicates); the
rows are gathered on every rank and put back in input order, so N processes score exactly what one does.
Preprocessing (decoding, resizing, tokenizing) runs in the loader's workers, not between forwards.

Under DeepSpeed ZeRO-3 every forward is a collective (each layer's partitions are gathered from all ranks), so
the ranks must run the same number of forwards: there every rank gets the same number of memes (`EqualShares`,
padded with repeats of the first ones, as DistributedSampler pads) and the repeats are dropped when the rows are gathered.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from crossmod.data.batches import SamplesToBatch
from crossmod.models.sharding import is_zero3
from crossmod.runtime.console import configure_console
from crossmod.runtime.progress import console_progress
from crossmod.runtime.strategies import with_default_strategy


class _Positions(Dataset):
    """The records with their positions in the list (what puts gathered rows back in order)."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, position: int) -> tuple[int, dict[str, Any]]:
        return position, self.records[position]


class _PositionedBatches:
    """Records → the model's batch, plus their positions (`index`); picklable for loader workers."""

    def __init__(self, preprocessor: Any) -> None:
        self.to_batch = SamplesToBatch(preprocessor)

    def __call__(self, items: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
        batch = self.to_batch([record for _, record in items])
        batch["index"] = torch.tensor([position for position, _ in items], dtype=torch.long)
        return batch


class EqualShares(DistributedSampler):
    """Every rank the same number of positions, in order, padded by repeating the first ones (DistributedSampler's
    rule): what keeps ZeRO-3 ranks in lockstep. Ranks are read when iterated, after Lightning set up the processes."""

    def __init__(self, dataset: Dataset) -> None:  # noqa: D107 (no process group yet: DistributedSampler's own init needs one)
        self.dataset, self.epoch, self.seed, self.shuffle, self.drop_last = dataset, 0, 0, False, False
        self._place()

    def _place(self) -> None:
        self.num_replicas = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.num_samples = -(-len(self.dataset) // self.num_replicas)  # type: ignore[arg-type]
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):  # type: ignore[no-untyped-def]
        self._place()
        return super().__iter__()

    def __len__(self) -> int:
        self._place()
        return self.num_samples


def single_device_trainer(accelerator: str = "cpu") -> L.Trainer:
    """One process on one device (tests, benchmarks, and jobs that score inside another run)."""
    return scoring_trainer(OmegaConf.create({"_target_": "lightning.pytorch.Trainer", "accelerator": accelerator, "devices": 1}))


def scoring_trainer(trainer_cfg: DictConfig) -> L.Trainer:
    """A Trainer for scoring from the run's `trainer=` group: no loggers, no checkpoints, progress as the console wants."""
    configure_console()
    trainer_cfg = with_default_strategy(trainer_cfg).copy()
    with open_dict(trainer_cfg):
        trainer_cfg.default_root_dir = None  # scoring writes no Lightning files
    return instantiate(trainer_cfg, logger=False, callbacks=[console_progress()], enable_checkpointing=False, enable_model_summary=False)


def predict_in_order(
    trainer: L.Trainer, module: L.LightningModule, records: list[dict[str, Any]], batch_size: int, preprocessor: Any, num_workers: int = 0
) -> list[dict[str, Any]]:
    """`module.predict_step`'s outputs split per record, in record order, on every rank. A step returns `index`
    (the batch's positions) and per-record fields: tensors with the batch first, or lists."""
    positions = _Positions(records)
    loader = DataLoader(
        positions,
        batch_size=batch_size,
        sampler=EqualShares(positions) if is_zero3(trainer.strategy) else None,  # else Lightning's: every meme once
        num_workers=num_workers,
        collate_fn=_PositionedBatches(preprocessor),
    )
    outputs = trainer.predict(module, dataloaders=loader, return_predictions=True) or []
    local: list[tuple[int, dict[str, Any]]] = []
    for output in outputs:
        fields = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in output.items() if k != "index"}
        for row, position in enumerate(output["index"].tolist()):
            local.append((position, {k: row_of(v, row) for k, v in fields.items()}))
    if trainer.world_size > 1:  # each rank scored its share (Lightning's unrepeated sampler): gather them all
        gathered: list[Any] = [None] * trainer.world_size
        dist.all_gather_object(gathered, local)
        local = [entry for part in gathered for entry in part]
    by_position = dict(local)  # a repeat (EqualShares' padding) lands on its position again
    if sorted(by_position) != list(range(len(records))):
        raise RuntimeError(f"prediction returned {len(by_position)} of {len(records)} memes: a rank's predictions are missing")
    return [by_position[position] for position in range(len(records))]


def row_of(values: Any, row: int) -> Any:
    """One record's part of a step's field: a tensor's row as a list, a list's item, a mapping of them."""
    if isinstance(values, dict):
        return {k: row_of(v, row) for k, v in values.items()}
    if isinstance(values, torch.Tensor):
        return values[row].reshape(-1).tolist()
    return values[row]


def probabilities(
    trainer: L.Trainer, model: Any, records: list[dict[str, Any]], batch_size: int, num_workers: int = 0
) -> list[dict[str, list[float]]]:
    """Each record's probabilities per head (a list per head: one value, or one per class), in record order."""
    rows = predict_in_order(trainer, model, records, batch_size, model.preprocessor, num_workers)
    return [row["probabilities"] for row in rows]


def prediction_rows(
    records: list[dict[str, Any]],
    scores: list[dict[str, list[float]]],
    heads: dict[str, Any],
    threshold: float,
    neighbours: list[dict[str, list[dict[str, Any]]] | None] | None = None,
    calibrators: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per meme: each binary head's probability and decision (probability ≥ threshold), and with a
    calibration map (the export's, fitted on its run's selection split) the calibrated probability beside it; other heads'
    class probabilities, the OCR caption when one was read, and (a retrieval classifier) the neighbours that voted:
    their ids, labels and similarities, nearest first."""
    from crossmod.evaluation.calibration import apply_calibrator

    calibrators = calibrators or {}
    calibrated = {
        name: apply_calibrator([score[name][0] for score in scores], calibrators[name]).tolist()
        for name, head in heads.items()
        if head.is_binary and name in calibrators and scores
    }
    rows = []
    for position, (record, score) in enumerate(zip(records, scores)):
        row: dict[str, Any] = {"id": record["id"]}
        if "ocr_text" in record:
            row["ocr_text"] = record["ocr_text"]
        explained = neighbours[position] if neighbours else None
        for name, head in heads.items():
            if head.is_binary:
                row[f"{name}_probability"] = score[name][0]
                row[f"{name}_decision"] = int(score[name][0] >= threshold)
                if name in calibrated:
                    row[f"{name}_probability_calibrated"] = calibrated[name][position]
            else:
                row[f"{name}_probabilities"] = [round(p, 6) for p in score[name]]
            if explained and name in explained:
                row[f"{name}_neighbours"] = [n["id"] for n in explained[name]]
                row[f"{name}_neighbour_labels"] = [n["label"] for n in explained[name]]
                row[f"{name}_neighbour_similarities"] = [n["similarity"] for n in explained[name]]
        rows.append(row)
    return rows


def score(
    trainer: L.Trainer,
    model: Any,
    records: list[dict[str, Any]],
    batch_size: int,
    threshold: float,
    num_workers: int = 0,
    calibrators: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Prediction rows for `records` (see `prediction_rows`), the same on every rank."""
    rows = predict_in_order(trainer, model, records, batch_size, model.preprocessor, num_workers)
    scores = [row["probabilities"] for row in rows]
    return prediction_rows(records, scores, model.heads, threshold, [row.get("neighbours") for row in rows], calibrators)


def with_actions(rows: list[dict[str, Any]], culture: str, policy: dict[str, Any]) -> None:
    """Add `<culture>_action` (act, review or allow, from the raw probability and the card's policy thresholds) and the
    policy's name to each prediction row, in place."""
    import numpy as np

    from crossmod.evaluation.policies import decide

    thresholds = {action: record.get("threshold") for action, record in policy["actions"].items()}  # None: unreachable
    actions = decide(np.array([row[f"{culture}_probability"] for row in rows], dtype=float), thresholds)
    for row, action in zip(rows, actions, strict=True):
        row[f"{culture}_action"], row["policy"] = str(action), policy["name"]

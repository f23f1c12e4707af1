"""One console: each log record printed once, no third-party advertisements, harmless library warnings silenced.

Hydra's root handler prints (and files) every record; Lightning attaches console handlers of its own to
the `lightning`, `lightning.pytorch` and `lightning.fabric` loggers, so each record came out twice.
Only warnings known to be harmless for crossmod are filtered, each with the reason; crossmod's own
warnings, and every other library warning, stay.
"""

from __future__ import annotations

import logging
import warnings

# Records Lightning logs to advertise a product, not to report on the run.
ADVERTISEMENTS = ("💡 Tip:",)

# (message regex, why it is harmless here)
HARMLESS_WARNINGS = (
    (
        r"\.with_length\(\) only sets the value of __len__",
        "webdataset: crossmod sets the length on purpose so Lightning can size epochs; the epoch itself is fixed by with_epoch",
    ),
    (
        r"Your `IterableDataset` has `__len__` defined",
        "Lightning: each worker reads its own shards (ShardsForConsumer / resampled streams), so the length is exact",
    ),
    (
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        "a deprecation inside Lightning's own code (utilities/_pytree.py), nothing crossmod calls",
    ),
    (
        r"It is recommended to use `self\.log\('(val|test)/.*sync_dist=True\)`",
        "Lightning: epoch metrics are torchmetrics states already reduced across ranks in compute(); every rank logs the same value",
    ),
    (
        r"The `srun` command is available on your system but is not used",
        "Lightning, on any machine with SLURM installed: a run started without srun is a local run by choice; "
        "crossmod's SLURM scripts launch with srun themselves (src/crossmod/training/slurm.py checks the allocation)",
    ),
    (
        r"`broadcast_buffers` is deprecated\. Use `forward_sync_buffers` instead",
        "torch's DistributedDataParallel renamed the option configs/strategy/ddp.yaml sets; the old name is the one "
        "every supported torch (>= 2.4) accepts, and False still means no per-forward buffer broadcast (the reason it is set)",
    ),
    (
        r"You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable",
        "Lightning looks for resume state on the loader; crossmod's training stream keeps its position in the "
        "datamodule's state (src/crossmod/data/stream_position.py): a mid-epoch resume replays exactly the batches the "
        "uninterrupted run would (tests/data/test_stream_position.py), and the resume line says where it starts",
    ),
    (
        r"`is_gradient_checkpointing` is deprecated",
        "PEFT (peft_model.py) reads Transformers' former property name; crossmod uses the current one",
    ),
)


# (logger, message start, why it is harmless): records of libraries' own loggers, dropped where they are made
HARMLESS_RECORDS = (
    (
        "DeepSpeed",
        "Setting accelerator to CPU",
        "DeepSpeed's accelerator detection, on a machine without CUDA, whenever anything imports deepspeed (Transformers "
        "does while saving a model); crossmod's DeepSpeed strategy runs its CPU path there on purpose, and a GPU node "
        "never prints it",
    ),
)


class _DropHarmlessRecords(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def silence_harmless_records() -> None:
    """Install the filters on the libraries' loggers (idempotent; before the library logs: at import of the entry
    points' resolvers, since resolving a config may build a model that imports DeepSpeed)."""
    for name in {logger for logger, _, _ in HARMLESS_RECORDS}:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropHarmlessRecords) for f in logger.filters):
            logger.addFilter(_DropHarmlessRecords(tuple(m for n, m, _ in HARMLESS_RECORDS if n == name)))


class _DropAdvertisements(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(ADVERTISEMENTS)


def configure_console() -> None:
    """Call once per process before the Trainer is built (idempotent)."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropAdvertisements) for f in rank_zero.filters):
        rank_zero.addFilter(_DropAdvertisements())
    for message, _why in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    silence_harmless_records()
    # Transformers 5 draws a bar on every from_pretrained ("Loading weights") and save_pretrained ("Writing model
    # shards"): the tag similarity's embedding model, exported model folders. A bar for a second's work that crossmod's
    # own progress lines and "[export]" lines already cover.
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

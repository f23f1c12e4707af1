"""Train → score the selected weights (validation set, then the test stage once) → write run files: what `train.py` runs.

Which weights are scored is the run's selection rule (`crossmod.data.selection_rules.RULES`): in a fold run the
held-out fold is the test stage, scored once at the end, and no choice made during fit ever saw it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from crossmod.artifacts import adapter_folder
from crossmod.artifacts.consolidate import restore_weights, zero_state_dict
from crossmod.artifacts.finished_run import finished_run_checkpoints
from crossmod.artifacts.runs import copy_manifest, nest, save_config, write_metrics
from crossmod.data.selection_rules import RULES
from crossmod.evaluation.abstention import abstention_on_test
from crossmod.evaluation.alignment import read_predictions
from crossmod.evaluation.thresholds import calibration_on_selection, policy_on_selection, threshold_on_selection
from crossmod.models.backbone import Adapters
from crossmod.models.objectives import AnnotatorGroups
from crossmod.models.sharding import is_zero3, parameter_counts
from crossmod.results.baselines import prepare as measure_baselines
from crossmod.results.baselines import read as read_baselines
from crossmod.results.culture_table import print_abstention, print_baselines, print_calibration, print_policy, print_table, print_votes
from crossmod.results.votes import check_training_votes, training_groups, votes_on_test
from crossmod.runtime.console import configure_console
from crossmod.runtime.resolvers import run_variants, task_overrides
from crossmod.runtime.run_environment import run_environment
from crossmod.runtime.strategies import with_default_strategy
from crossmod.runtime.threads import share_cores
from crossmod.training.callbacks.fold_results import FoldResultWriter
from crossmod.training.callbacks.interruption import Interrupted, InterruptionCheckpoint
from crossmod.training.callbacks.rng_states import RngStates
from crossmod.training.run_status import RunStatus, command_line
from crossmod.training.selection import NO_VALIDATION, without_selection
from crossmod.training.slurm import SlurmRequeue, check_allocation, requeue_checkpoint


def _instantiate_all(group: DictConfig | None) -> list[Any]:
    return [instantiate(node) for node in (group or {}).values() if node is not None and "_target_" in node]


def flush_subnormals() -> None:
    """Compute with subnormal floats flushed to zero on the CPU. Adam's second moments of weights whose
    gradients fade (a vision tower fed blank images under `data.ablate=image`) sink into the subnormal
    range, where x86 arithmetic is microcoded: a tiny VLM's CPU epoch went from 15 s to 3.5 min. GPUs'
    fast paths flush them already; values below 1.2e-38 change nothing a loss can see."""
    torch.set_flush_denormal(True)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Fit, then score the best checkpoint on val and test; return (and save) the metrics. The run's status file says
    how it ended; a signal saves a resumable checkpoint and exits with 128 + its number (src/crossmod/training/callbacks/interruption.py)."""
    configure_console()
    flush_subnormals()
    check_allocation(cfg.trainer)  # under srun: trainer nodes x devices must match the job's tasks
    L.seed_everything(cfg.seed, workers=True)
    run_dir = Path(cfg.paths.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    status = RunStatus(run_dir)
    interruption = InterruptionCheckpoint(run_dir / "checkpoints" / "last.ckpt")
    interruption.install()
    status.write("running")
    try:
        metrics = _run(cfg, run_dir, interruption)
    except BaseException as error:
        # a signal may surface wrapped by the library it interrupted (Hydra's instantiate re-raises it as its own error)
        if isinstance(error, SIGTERMException | Interrupted) or (interruption.signum is not None and not isinstance(error, SystemExit)):
            _stopped(status, interruption)
        if not (isinstance(error, SystemExit) and error.code in (None, 0)):
            status.write("failed", error=f"{type(error).__name__}: {error}"[:2000])
        raise
    slim = finished_run_checkpoints(run_dir, metrics.get("best_checkpoint"), keep=bool(cfg.get("keep_resume_checkpoints", False)))
    status.write("finished", **({"removed_resume_checkpoints": slim} if slim else {}))
    close_process_group()
    return metrics


def _stopped(status: RunStatus, interruption: InterruptionCheckpoint) -> None:
    """A signal stopped the run (in setup, training or scoring): say so, and exit with 128 + its number."""
    name = signal.Signals(interruption.signum or signal.SIGTERM).name
    facts: dict[str, Any] = {"signal": name, "checkpoint": str(interruption.saved) if interruption.saved else None}
    if interruption.saved:
        facts["resume"] = f"{command_line()} ckpt_path={interruption.saved}"
    status.write("interrupted", **facts)
    rank_zero_info(
        f"Stopped by {name}" + (f"; resume with: {facts['resume']}" if interruption.saved else " (outside training: nothing to resume)")
    )
    raise SystemExit(interruption.exit_status()) from None


def close_process_group() -> None:
    """Destroy the default process group once the run is done (no collective follows). Left to interpreter exit, gloo's
    threads were destroyed while still joinable and a finished rank aborted ("terminate called without an active
    exception": the SLURM ZeRO-3 job, twice), so a job whose every number was written ended FAILED."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@dataclass
class RunParts:
    """What a run is made of: its data, model, trainer and loggers, the eval_data plan (or None), and whether it
    validates at all (cv.selection=last does not)."""

    datamodule: Any
    model: Any
    trainer: L.Trainer
    loggers: list[Any]
    transfer: Any
    no_validation: bool


@dataclass
class ScoredWeights:
    """What scoring the selected weights gave: the scores, the checkpoint the rule chose (None: the final weights), the
    weights eval_data is scored with, and the rule's description (saying so when a selection did not happen)."""

    scores: dict[str, Any]
    best: str | None
    weights: str | None
    rule: str
    description: str


def _run(cfg: DictConfig, run_dir: Path, interruption: InterruptionCheckpoint) -> dict[str, Any]:
    parts = _build(cfg, interruption)
    if parts.trainer.is_global_zero:
        save_config(cfg, run_dir)
    for logger in parts.loggers:
        logger.log_hyperparams(_loggable(cfg))
    final_val: dict[str, float] = {}
    if isinstance(parts.model.objective, AnnotatorGroups) and parts.model.objective.groups is None:  # before LP-FT starts them
        parts.datamodule.prepare_data()
        parts.datamodule.setup("fit")
        records, dataset = parts.datamodule.stage_records("train"), parts.datamodule.dataset_dir.name
        parts.model.with_groups(training_groups(records, parts.model.heads, parts.model.objective.by, dataset))
    fresh = cfg.get("train", True) and not cfg.get("ckpt_path")  # a resumed run keeps the baselines it measured
    baselines = measure_baselines(cfg, parts.datamodule, parts.model, parts.trainer, run_dir) if fresh else read_baselines(run_dir)
    if cfg.get("train", True) and parts.model.objective.needs_votes:  # soft_votes: training memes with votes, or refused
        parts.datamodule.prepare_data()
        parts.datamodule.setup("fit")
        check_training_votes(parts.datamodule.stage_records("train"), parts.model.heads, parts.datamodule.dataset_dir.name)
    if cfg.get("train", True):
        requeued = requeue_checkpoint(Path(parts.trainer.default_root_dir)) if SLURMEnvironment.detect() else None
        resume = cfg.get("ckpt_path") or requeued
        parts.trainer.fit(parts.model, datamodule=parts.datamodule, ckpt_path=resume)  # a requeued job: where it stopped
        final_val = {k: float(v) for k, v in parts.trainer.callback_metrics.items() if k.startswith("val/")}
    scored = _score_selected(cfg, parts)
    metrics = _metrics(cfg, parts, scored, final_val)
    if baselines is not None:
        metrics["baselines"] = baselines
    if isinstance(parts.model.backbone, Adapters) and cfg.model.get("fusion", {}).get("lora"):
        # every rank takes part (ZeRO-3 gathers the adapter collectively); rank 0 writes the scored weights
        metrics["adapter"] = str(adapter_folder.save(parts.model, run_dir / "adapter", write=parts.trainer.is_global_zero))
    if parts.trainer.is_global_zero:
        _write_run(cfg, run_dir, parts, scored, metrics)
    return metrics


def _build(cfg: DictConfig, interruption: InterruptionCheckpoint) -> RunParts:
    """Data, model (its preprocessor connected to the data), callbacks, loggers and trainer, from the composed config."""
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, _recursive_=False)
    datamodule.connect(model.preprocessor)  # the model's side hands the data what it needs; data never reaches into it
    transfer = None
    if cfg.get("eval_data"):  # a second dataset to score after training: checked now, so a run that could not be scored never trains
        from crossmod.results.eval_data import TransferOptions, plan_transfer

        transfer = plan_transfer(cfg.eval_data, TransferOptions.from_config(cfg.get("transfer")), model)
    # Exact resume everywhere (RNG states travel in checkpoints, as the datamodule's stream position does);
    # the signal handling and requeue only inside a SLURM job.
    callbacks = _instantiate_all(cfg.get("callbacks")) + [RngStates(), SlurmRequeue(enabled=SLURMEnvironment.detect()), interruption]
    no_validation = datamodule.folds.selection == "last"  # fixed schedule, final weights (fold run or not): no validation loop
    if no_validation:
        callbacks = without_selection(callbacks)
    loggers = _instantiate_all(cfg.get("logger"))
    trainer_cfg = with_default_strategy(cfg.trainer)
    trainer: L.Trainer = instantiate(trainer_cfg, callbacks=callbacks, logger=loggers or False, **(NO_VALIDATION if no_validation else {}))
    share_cores(trainer.num_devices)  # this run's processes on the node share its cores
    return RunParts(datamodule, model, trainer, loggers, transfer, no_validation)


def _score_selected(cfg: DictConfig, parts: RunParts) -> ScoredWeights:
    """Validation, then the test stage once, with the weights the selection rule chose (the final ones where it chose
    none, and the description says why)."""
    trainer, model, datamodule = parts.trainer, parts.model, parts.datamodule
    best = _best_checkpoint(trainer)
    final_weights_why = None  # set when a rule that selects a checkpoint ended up scoring the final weights
    if parts.no_validation:
        where = "the held-out fold" if cfg.get("fold") is not None else "the test split"
        rank_zero_info(f"cv.selection=last: scoring the final weights on {where}, once.")
    elif not best and cfg.get("train", True):
        final_weights_why = _why_no_checkpoint(trainer)
        rank_zero_info(f"No best checkpoint ({final_weights_why}): scoring the final weights.")
    ckpt_path = best or (None if cfg.get("train", True) else cfg.get("ckpt_path"))
    scored_weights = ckpt_path  # what eval_data is scored with, too
    if ckpt_path and is_zero3(trainer.strategy):
        # A ZeRO-3 engine built for evaluation cannot load sharded checkpoints (DeepSpeed has no optimizer
        # there to restore partitions from): the checkpoint's weights are put into the model instead.
        restore_weights(model, zero_state_dict(ckpt_path))
        ckpt_path = None
    scores: dict[str, Any] = {}
    # ckpt_path=None means these weights, also after a SLURM requeue (its checkpoints lie where Lightning does not look).
    # Lightning returns no results for a loop limited to 0 batches (trainer.limit_val_batches=0): nothing to add
    if not parts.no_validation:
        scores.update(next(iter(trainer.validate(model, datamodule=datamodule, ckpt_path=ckpt_path, verbose=False)), {}))
    if cfg.get("test", True) and datamodule.has_test_stage:
        scores.update(next(iter(trainer.test(model, datamodule=datamodule, ckpt_path=ckpt_path, verbose=False)), {}))
    if cfg.get("test", True) and not datamodule.has_test_stage:
        rank_zero_info(f"dataset {datamodule.manifest['dataset']} has no test split {datamodule.folds.test_splits}: no test stage.")
    rule = datamodule.selection_rule
    description = RULES[rule]
    if final_weights_why:  # the rule names a selection that did not happen: say what was scored
        description = f"final weights after the configured schedule, no checkpoint selected ({final_weights_why})"
    return ScoredWeights(scores, best, scored_weights, rule, description)


def _why_no_checkpoint(trainer: L.Trainer) -> str:
    monitor = _monitor(trainer)
    if trainer.fast_dev_run:
        return "fast_dev_run suppresses checkpointing"
    if monitor:
        return f"no validation could be ranked by {monitor}; see the warnings above"
    return "checkpointing disabled or no validation"


def _metrics(cfg: DictConfig, parts: RunParts, scored: ScoredWeights, final_val: dict[str, float]) -> dict[str, Any]:
    """metrics.json's record of the run: what it was, which rule chose the scored weights, and their scores."""
    trainer = parts.trainer
    selection = {"rule": scored.rule, "description": scored.description, "weights": scored.best or "final", "monitor": _monitor(trainer)}
    return {
        "experiment": cfg.label,
        "variants": run_variants(cfg, task_overrides(cfg)),
        "fold": cfg.get("fold"),
        "num_folds": cfg.get("num_folds") if cfg.get("fold") is not None else None,
        "seed": cfg.seed,
        "best_checkpoint": scored.best,
        "selection": selection,
        "global_step": trainer.global_step,
        "epochs": trainer.current_epoch,
        "parameters": parameter_counts(parts.model.parameters()),
        "environment": run_environment(trainer, parts.datamodule.streaming.num_workers),
        "best": {"val": nest(scored.scores, "val"), "test": nest(scored.scores, "test")},
        "final": {"val": nest(final_val, "val")},
    }


def fold_record(callbacks: list[L.Callback]) -> dict[str, Any] | None:
    """The fold result this run wrote (a fold run's held-out votes and policy, measured once), or None."""
    for callback in callbacks:
        if isinstance(callback, FoldResultWriter) and callback.written is not None:
            return callback.written
    return None


def _write_run(cfg: DictConfig, run_dir: Path, parts: RunParts, scored: ScoredWeights, metrics: dict[str, Any]) -> None:
    """Rank 0: the manifest, metrics.json (with the threshold chosen on the selection set, and eval_data's scores) and
    the per-culture table."""
    trainer, transfer = parts.trainer, parts.transfer
    copy_manifest(parts.datamodule.dataset_dir, run_dir)
    metrics["selection_threshold"] = threshold_on_selection(run_dir / "predictions")
    metrics["calibration"] = calibration_on_selection(run_dir / "predictions", cfg.get("calibration") or "temperature")
    if (run_dir / "predictions" / "test.csv").is_file():  # which memes to send to review: the cultures' disagreement
        test = read_predictions(run_dir / "predictions" / "test.csv")
        metrics["abstention"] = abstention_on_test(metrics["selection_threshold"], test, cfg.get("abstention") or "spread")
        datamodule, heads, written = parts.datamodule, parts.model.heads, fold_record(trainer.callbacks)
        if written is not None:  # a fold run: its fold result measured them, on the same predictions
            votes = written.get("votes")
        else:
            votes = votes_on_test(test[0], lambda: datamodule.stage_records("train"), datamodule.stage_records("test"), heads)
        if votes is not None:  # the held-out memes' annotators voted: the soft metrics and the cultures' disagreement
            metrics["votes"] = votes
    if cfg.get("policy"):  # the moderation policy's thresholds, chosen on val per culture (configs/policy/)
        written = fold_record(trainer.callbacks)
        if written is not None and "policy" in written:
            metrics["policy"] = written["policy"]
        else:
            metrics["policy"] = policy_on_selection(run_dir / "predictions", OmegaConf.to_container(cfg.policy, resolve=True))
    write_metrics(run_dir, metrics)
    if cfg.get("plots", True):
        from crossmod.results.run_figures import write_run_figures

        write_run_figures(run_dir, cfg.label)
    if transfer is not None:  # reads the run's files just written, as evaluate.py would
        from crossmod.results.eval_data import score_transfer

        sharded, device = is_zero3(trainer.strategy), trainer.strategy.root_device
        scores = score_transfer(transfer, run_dir, metrics, parts.model, scored.weights, sharded, device)
        metrics["transfer"] = {transfer.dataset: scores}
        write_metrics(run_dir, metrics)
    if cfg.get("print_table", True):
        fold = f" (fold {cfg.fold} of {cfg.num_folds})" if cfg.get("fold") is not None else ""  # a run without folds says none
        print_table(metrics, f"{cfg.label}{fold}", f"Selection: {scored.rule} — {scored.description}")
        if metrics.get("baselines"):
            print_baselines(metrics)
        print_calibration(metrics)
        print_abstention(metrics)
        print_votes(metrics)
        print_policy(metrics)
        if transfer is not None:
            from crossmod.results.eval_data import print_transfer

            print_transfer(metrics["transfer"][transfer.dataset], transfer.options.reference)
        print(f"Run directory: {run_dir}")


def _best_checkpoint(trainer: L.Trainer) -> str | None:
    """The best checkpoint of the callback that monitors a metric (not the one keeping `last.ckpt`)."""
    for callback in trainer.callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.monitor and callback.best_model_path:
            return callback.best_model_path
    return None


def _monitor(trainer: L.Trainer) -> str | None:
    for callback in trainer.callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.monitor:
            return f"{callback.monitor} ({callback.mode})"
    return None


def _loggable(cfg: DictConfig) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from crossmod.artifacts.runs import redact

    return redact(OmegaConf.to_container(cfg, resolve=True))

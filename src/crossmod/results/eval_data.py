"""A second dataset a run is scored on (`eval_data=<dataset>`): train on one dataset, report on another.

This is the protocol of the Multilingual HateCheck study's reference model (XTC): trained and early-stopped
on other hate-speech data, only *evaluated* on MHC. Before training, `plan_transfer` converts the evaluated
data, matches its hate head to one trained binary head (`transfer.head`) and checks that its memes carry
the inputs the model reads, so a run that could not be scored stops before it trains. After training,
`score_transfer` (rank 0) loads the weights the run's selection rule chose on the *training* data's
validation split, scores the evaluated data with them (every split by default: an evaluation-only set)
through `crossmod.results.evaluate.evaluate` — the report `evaluate.py` writes, MHC's functional tests
included — into `<run>/transfer/<dataset>/`, and returns the numbers for `metrics.json`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from rich.console import Console
from rich.table import Table

from crossmod.data.heads import Head
from crossmod.data.memes import MemeDataModule
from crossmod.data.predict_inputs import check_inputs
from crossmod.evaluation.functional import functional_metrics
from crossmod.models.scoring_rules import HeadScores
from crossmod.results.evaluate import Loaded, evaluate, one_device_scorer
from crossmod.results.scored_splits import RunFacts, ScoredSplit, run_facts, scored_splits
from crossmod.runtime.user_errors import UserError


class EvalDataError(UserError, ValueError):
    """eval_data cannot be scored by this model (head mapping, missing inputs): raised before training, and
    printed by train.py as one message (src/crossmod/runtime/user_errors.py)."""


@dataclass(frozen=True)
class TransferOptions:
    """`transfer.*` of train.yaml."""

    head: str | None = None
    split: str = "all"
    threshold: float = 0.5
    batch_size: int = 32
    allow_missing: tuple[str, ...] = ()
    reference: dict[str, Any] | None = None

    @classmethod
    def from_config(cls, node: Any) -> TransferOptions:
        values = dict(node or {})
        values["allow_missing"] = tuple(values.get("allow_missing") or ())
        values["reference"] = dict(values["reference"]) if values.get("reference") else None
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise EvalDataError(f"transfer: unknown option(s) {unknown}; known: {[f.name for f in dataclasses.fields(cls)]}")
        return cls(**values)


@dataclass
class TransferPlan:
    """What a transfer evaluation scores: the evaluated data and which trained head answers for its hate head."""

    datamodule: MemeDataModule
    dataset: str
    eval_head: Head
    trained_head: str
    head_rule: str  # how the trained head was chosen, for the report
    options: TransferOptions


def hate_head(heads: dict[str, Head], dataset: str) -> Head:
    """The evaluated data's one binary head (MHC: `hateful`)."""
    binary = [head for head in heads.values() if head.is_binary]
    if len(binary) != 1:
        raise EvalDataError(
            f"eval_data {dataset} declares binary heads {[h.name for h in binary]} (heads: {sorted(heads)}): a transfer "
            "evaluation scores one hate head; set eval_data.heads to the one to score"
        )
    return binary[0]


def trained_head(
    model_heads: dict[str, Head], eval_head: Head, requested: str | None, dataset: str, key: str = "transfer.head"
) -> tuple[str, str]:
    """(trained head, how it was chosen): `transfer.head` (evaluate.py: `head`) when given, else the model's head of the
    evaluated head's name, else the model's only binary head; anything else is an error naming the heads."""
    binary = [name for name, head in model_heads.items() if head.is_binary]
    if requested is not None:
        if requested not in model_heads:
            raise EvalDataError(f"{key}={requested} is not a head of the model (heads: {list(model_heads)})")
        if requested not in binary:
            raise EvalDataError(
                f"{key}={requested} is a {model_heads[requested].kind} head: {dataset}'s {eval_head.name} head "
                f"needs a binary one (binary heads: {binary})"
            )
        return requested, f"{key}={requested}"
    if eval_head.name in binary:
        return eval_head.name, f"same name as {dataset}'s head"
    if len(binary) == 1:
        return binary[0], "the model's only binary head"
    raise EvalDataError(
        f"eval_data {dataset} is scored on its {eval_head.name!r} head, and the model has binary heads {binary}: name the one "
        f"that answers for it with {key}=<head> (e.g. {key}={binary[0] if binary else '…'})"
    )


def plan_transfer(eval_data: Any, options: TransferOptions, model: Any) -> TransferPlan:
    """Convert eval_data, map the heads and check the inputs: everything that could stop the scoring, before training."""
    datamodule: MemeDataModule = instantiate(eval_data)
    manifest = datamodule.conversion.convert()
    dataset = manifest["dataset"]
    eval_head = hate_head(datamodule.heads, dataset)
    if eval_head.name not in manifest["heads"]:
        raise EvalDataError(
            f"eval_data {dataset} ({datamodule.dataset_dir}) has no head {eval_head.name!r} (heads: {sorted(manifest['heads'])})"
        )
    head, rule = trained_head(model.heads, eval_head, options.head, dataset)
    placeholder = RunFacts(name="this run")  # the memes split= names, read once here to check them
    (scored,) = scored_splits([placeholder], options.split, datamodule.dataset_dir, datamodule.folds.test_splits).values()
    try:
        check_inputs(scored.records, model.preprocessor.needs, frozenset(options.allow_missing))
    except ValueError as error:
        raise EvalDataError(
            f"eval_data {dataset} ({datamodule.dataset_dir}): {error}. In crossmod train that option is transfer.allow_missing; "
            f"or train a model that reads only what {dataset} has"
        ) from None
    return TransferPlan(datamodule, dataset, eval_head, head, rule, options)


class ScoredAs(L.LightningModule):
    """A trained classifier whose `trained` head answers as the evaluated data's head: the explicit head mapping."""

    def __init__(self, model: Any, trained: str, eval_head: Head, rule: str | None = None) -> None:
        super().__init__()
        if not model.heads[trained].is_binary:
            raise EvalDataError(f"head {trained} is {model.heads[trained].kind}, not binary")
        self.model, self.trained, self.head_rule = model, trained, rule
        self.preprocessor = model.preprocessor
        self.heads = {eval_head.name: eval_head}

    def configure_model(self) -> None:
        """The classifier is built by Lightning, inside the strategy's init context (ZeRO-3: in partitions)."""
        self.model.configure_model()

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        (name,) = self.heads
        return {name: self.model(batch)[self.trained]}

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        """The probabilities of its forward (the classifier's own scoring rule, the mapped head), as a classifier's
        predict step gives them (src/crossmod/inference/scoring.py)."""
        return HeadScores().predict(self, batch)


def selected_model(run_dir: Path, scored_weights: str | None, model: Any, sharded: bool) -> tuple[Any, str]:
    """The weights the run scored: its selected checkpoint loaded from disk, else (no checkpoint chosen) its final weights."""
    from crossmod.artifacts.loading import load

    if scored_weights:
        loaded, info = load(run_dir, str(scored_weights), retrieval_bank=False)
        return loaded, info["checkpoint"]
    if not sharded:
        return model, "final weights (no checkpoint was selected)"
    last = run_dir / "checkpoints" / "last.ckpt"
    if last.exists():
        loaded, info = load(run_dir, "last", retrieval_bank=False)
        return loaded, info["checkpoint"]
    raise EvalDataError(
        f"{run_dir}: the final weights are sharded and no checkpoint holds them (last.ckpt): nothing to score eval_data with"
    )


def _selection_value(metrics: dict[str, Any]) -> float | None:
    """The monitored validation value of the scored weights, e.g. val/US/f1 of the best checkpoint."""
    monitor = (metrics.get("selection") or {}).get("monitor")
    if not monitor:
        return None
    stage, *rest = monitor.split(" ")[0].split("/")
    head, metric = rest if len(rest) == 2 else ("all", rest[-1])
    return metrics["best"].get(stage, {}).get(head, {}).get(metric)


def score_transfer(
    plan: TransferPlan, run_dir: Path, metrics: dict[str, Any], model: Any, scored_weights: str | None, sharded: bool, device: torch.device
) -> dict[str, Any]:
    """Score eval_data with the run's selected weights; write `<run>/transfer/<dataset>/`; return the metrics.json entry.

    Needs the run's metrics.json and config.yaml (written before): the facts evaluate.py reads of a run."""
    training_dataset = json.loads((run_dir / "manifest.json").read_text())["dataset"]
    (facts,) = run_facts(run_dir)
    selected = bool(scored_weights) and scored_weights == metrics.get("best_checkpoint")
    if selected:
        chosen_on = f"{training_dataset} validation data"
    elif scored_weights:
        chosen_on = f"none by this run: the checkpoint it was given (ckpt_path={scored_weights})"
    else:
        chosen_on = f"none: the final weights of training on {training_dataset}"
    selection = {**(facts.selection or {}), "chosen_on": chosen_on, "selected": selected}
    selection["description"] = f"{selection.get('description', 'unknown rule')}; chosen on {chosen_on}, never on {plan.dataset}"
    facts = dataclasses.replace(facts, selection=selection)
    options = plan.options
    scored: ScoredSplit = scored_splits([facts], options.split, plan.datamodule.dataset_dir, plan.datamodule.folds.test_splits)[facts.name]
    if options.split == "all":
        scored.scored = f"all of {plan.dataset}, every split ({'+'.join(sorted({r.get('split') or 'all' for r in scored.records}))})"
    loaded, weights = selected_model(run_dir, scored_weights, model, sharded)
    out = run_dir / "transfer" / plan.dataset
    report = evaluate(
        [(facts.name, Loaded(ScoredAs(loaded, plan.trained_head, plan.eval_head, plan.head_rule)))],
        {facts.name: scored},
        {plan.eval_head.name: plan.eval_head},
        out,
        options.batch_size,
        options.threshold,
        plan.dataset,
        one_device_scorer("gpu" if device.type == "cuda" else "cpu"),  # Lightning's predict loop, on this rank's device
    )
    entry = report["runs"][facts.name]
    protocol = {
        "training_dataset": training_dataset,
        "eval_dataset": plan.dataset,
        "eval_dataset_dir": str(plan.datamodule.dataset_dir),
        "weights": weights,
        "selection": {**selection, "value": _selection_value(metrics)},
        "head": {"trained": plan.trained_head, "scored_as": plan.eval_head.name, "rule": plan.head_rule},
        "split": entry["split"],
        "threshold": options.threshold,
        "predictions": str(out / "predictions" / f"{facts.name.replace('/', '_')}.csv"),
    }
    report["protocol"] = protocol
    (out / "report.json").write_text(json.dumps(report, indent=1, default=float))
    summary = out / "summary.md"
    summary.write_text(protocol_markdown(protocol) + "\n" + summary.read_text())
    result: dict[str, Any] = {**protocol, "report_dir": str(out), "metrics": entry["metrics"].get(plan.eval_head.name, {})}
    if "mhc" in entry:
        functional = entry["mhc"]
        result["functional"] = {key: functional[key] for key in ("cases", "languages", "per_language", "per_target", "accuracy")}
        result["scalars"] = functional_metrics(functional, f"transfer/{plan.dataset}")
    return result


def protocol_markdown(protocol: dict[str, Any]) -> str:
    """What was trained where, which weights and head were scored and on which memes: summary.md's opening."""
    selection, head, split = protocol["selection"], protocol["head"], protocol["split"]
    value = f" = {selection['value']:.4f}" if selection.get("value") is not None else ""
    if selection["selected"]:
        chosen = f"rule `{selection.get('rule')}`, best {selection.get('monitor')}{value} on {selection['chosen_on']}"
    else:
        chosen = f"selected on {selection['chosen_on']}"
    return "\n".join(
        [
            f"# Transfer: trained on {protocol['training_dataset']}, evaluated on {protocol['eval_dataset']}",
            "",
            f"- Weights: `{protocol['weights']}`: {chosen}; {protocol['eval_dataset']} was never trained, validated or selected on.",
            f"- Head: the model's `{head['trained']}` head scored as {protocol['eval_dataset']}'s `{head['scored_as']}` ({head['rule']}).",
            f"- Scored: {split['scored']}, {split['items']} items (transfer.split={split['requested']}); "
            f"decisions at P(hate) ≥ {protocol['threshold']}.",
            "",
        ]
    )


def transfer_table(result: dict[str, Any], reference: dict[str, Any] | None = None) -> Table | None:
    """Per language: cases, F1-h, F1-nh, macro F1 (and a study's macro F1 beside it), for the console."""
    functional = result.get("functional")
    if not functional:
        return None
    table = Table(title=f"{result['eval_dataset']} (trained on {result['training_dataset']}): per language")
    columns = ["language", "cases", "F1-h", "F1-nh", "macro F1"]
    ref_scores = (reference or {}).get("macro_f1") or {}
    if ref_scores:
        columns.append(f"{reference.get('name', 'reference')} macro F1")
    for column in columns:
        table.add_column(column, justify="left" if column == "language" else "right")
    for lang in functional["languages"]:
        scores = functional["per_language"][lang]
        row = [lang, str(scores["cases"]), *(f"{100 * scores[k]:.1f}" for k in ("f1_h", "f1_nh", "macro_f1"))]
        if ref_scores:
            row.append("—" if ref_scores.get(lang) is None else f"{float(ref_scores[lang]):.1f}")
        table.add_row(*row)
    return table


def print_transfer(result: dict[str, Any], reference: dict[str, Any] | None = None) -> None:
    """The per-language table and one line naming the weights, head and report folder, after the run's own table."""
    console = Console()
    table = transfer_table(result, reference)
    if table is not None:
        console.print(table)
    metrics = result["metrics"]
    overall = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())
    console.print(
        f"Transfer to {result['eval_dataset']}: {overall} — weights {result['weights']} (chosen on "
        f"{result['selection']['chosen_on']}); head {result['head']['trained']} → {result['head']['scored_as']}; "
        f"report {result['report_dir']}",
        soft_wrap=True,
    )

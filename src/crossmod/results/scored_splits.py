"""Which memes `evaluate.py` scores each run on, and what the report says about them.

`split=auto` (the default) scores a fold run on exactly its held-out fold: the memes of the evaluated
dataset whose group the run's own fold assignment (the `manifest.json` copy in its run folder) puts in
its fold; every other run on the dataset's test split. A run folder is shared data, so that copy must
match the fold assignment the dataset itself stores (an altered copy would score memes the run trained
on). An explicit split scores that split for every run, with a loud warning where a run trained on (or
chose its weights on) the memes it is scored on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from crossmod.artifacts.consolidate import is_deepspeed_checkpoint
from crossmod.artifacts.runs import read_config
from crossmod.data.data_settings import default as data_default
from crossmod.data.folds import find_folds, find_inner_validation
from crossmod.data.remote import is_remote
from crossmod.data.shards import read_manifest, read_samples
from crossmod.evaluation.calibration import calibrator_of
from crossmod.runtime.user_errors import UserError

log = logging.getLogger(__name__)


class SplitError(UserError, ValueError):
    """The evaluated dataset lacks the split (or the run's held-out fold) a run is to be scored on: the message
    names it and the fix (`split=`); evaluate.py prints it as one line."""


@dataclass(frozen=True)
class RunFacts:
    """What a run folder says about how it was trained (all None for a bare checkpoint or an export)."""

    name: str
    run_dir: Path | None = None
    fold: int | None = None
    num_folds: int | None = None
    selection: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # where the facts come from, for messages
    # head → the calibration map the run fitted on its selection split (an export's card carries its culture's); none
    # for a checkpoint other than the weights the map was fitted on
    calibrators: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class ScoredSplit:
    """The memes one run is scored on and how the report names them."""

    records: list[dict[str, Any]]
    scored: str  # e.g. "held-out fold 1 of 3", "split test"
    requested: str  # the `split=` given (auto, test, val, train, all, or a split name)
    selection: dict[str, Any] | None
    warning: str | None = None

    trained_on: int = 0  # scored memes the run trained on (or, in a fold run, that were not its held-out fold)
    selected_on: int = 0  # scored memes the run chose its weights on
    baselines: dict[str, Any] | None = None  # the run's baselines on these very memes (its test stage), where it measured them
    calibrators: dict[str, dict[str, Any]] = field(default_factory=dict)  # head → the run's calibration map (RunFacts')

    def describe(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "scored": self.scored,
            "items": len(self.records),
            "trained_on": self.trained_on,
            "selected_on": self.selected_on,
            "warning": self.warning,
        }


def _data_setting(facts: RunFacts, name: str) -> Any:
    """A data setting of the run's resolved config, or the datamodule's default when the config left it out."""
    value = (facts.config.get("data") or {}).get(name)
    return data_default(name) if value is None else value


def run_facts(ckpt: Path) -> list[RunFacts]:
    """Facts for every model `crossmod.artifacts.loading.each_model(ckpt)` names, under the same names."""
    ckpt = Path(ckpt)
    if ckpt.is_file() or is_deepspeed_checkpoint(ckpt):
        run_dir = ckpt.parent.parent  # <run>/checkpoints/<name>.ckpt (a file, or a DeepSpeed directory)
        if (run_dir / "metrics.json").is_file() and (run_dir / "config.yaml").is_file():
            return [_facts_of_checkpoint(ckpt, run_dir)]
        return [RunFacts(ckpt.stem, source=str(ckpt))]
    card_path = ckpt / "culture_card.json"
    if card_path.is_file():
        try:
            card = json.loads(card_path.read_text())
        except ValueError:
            raise SplitError(f"{card_path}: not JSON", "re-export the run (crossmod export run=<run dir>)") from None
        config = card.get("training_config") if isinstance(card, dict) else None
        if not isinstance(config or {}, dict):
            raise SplitError(f"{card_path}: training_config is not an object", "re-export the run (crossmod export run=<run dir>)")
        config = config or {}
        # an export carries its run's manifest copy (fold assignment): it is scored and checked like its run folder
        run_dir = ckpt if (ckpt / "manifest.json").is_file() else None
        selection = card.get("selection") if isinstance(card.get("selection"), dict) else None
        fold, num_folds = config.get("fold"), config.get("num_folds")
        if fold is None:
            num_folds = None
        calibration = card.get("calibration")
        calibrators = {str(card.get("culture")): calibrator_of(calibration)} if isinstance(calibration, dict) else {}
        return [RunFacts(ckpt.name, run_dir, fold, num_folds, selection, config, str(card_path), calibrators)]
    if (ckpt / "metrics.json").is_file():
        return [_facts_of_run(ckpt.name, ckpt)]
    runs = sorted(p.parent for p in ckpt.rglob("metrics.json"))
    if not runs:
        raise FileNotFoundError(f"{ckpt}: no run (metrics.json), checkpoint or exported culture folder")
    return [_facts_of_run(str(run.relative_to(ckpt)), run) for run in runs]


def _facts_of_run(name: str, run_dir: Path) -> RunFacts:
    metrics_path, config_path = run_dir / "metrics.json", run_dir / "config.yaml"
    metrics = json.loads(metrics_path.read_text())
    config = OmegaConf.to_container(read_config(config_path)) if config_path.is_file() else {}
    fold, num_folds = metrics.get("fold"), metrics.get("num_folds")
    if fold is not None and not (isinstance(fold, int) and isinstance(num_folds, int) and 0 <= fold < num_folds):
        raise ValueError(f"{metrics_path}: fold={fold!r}, num_folds={num_folds!r} is not a fold k of n folds")
    heads = ((metrics.get("calibration") or {}).get("heads") or {}) if isinstance(metrics.get("calibration"), dict) else {}
    calibrators = {head: calibrator_of(row) for head, row in heads.items() if isinstance(row, dict) and ("calibrator" in row or "temperature" in row)}
    return RunFacts(name, run_dir, fold, num_folds, metrics.get("selection"), config, str(metrics_path), calibrators)


def _facts_of_checkpoint(ckpt: Path, run_dir: Path) -> RunFacts:
    """A checkpoint file inside a run: the run's facts, and a note when it is not the weights its rule chose."""
    facts = _facts_of_run(ckpt.stem, run_dir)
    chosen = (facts.selection or {}).get("weights")
    chosen_file = "last.ckpt" if chosen == "final" else Path(chosen).name if chosen else None  # final weights: last.ckpt
    if chosen_file and chosen_file != ckpt.name:
        selection = {**facts.selection, "weights": str(ckpt), "note": f"not the weights the run's rule chose ({chosen})"}
        facts = RunFacts(facts.name, run_dir, facts.fold, facts.num_folds, selection, facts.config, facts.source)  # no map: other weights
    return facts


class SplitReader:
    """Reads each split of the evaluated dataset once (image bytes included), however many runs share it."""

    def __init__(self, dataset_dir: Path) -> None:
        self.dataset_dir = dataset_dir if is_remote(dataset_dir) else Path(dataset_dir)
        self.manifest = read_manifest(self.dataset_dir)
        self.present = sorted(self.manifest["counts"]["split"])
        self._cache: dict[str, list[dict[str, Any]]] = {}

    def read(self, splits: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """(split, record) for the memes of `splits`, split after split, each in shard order."""
        missing = [s for s in splits if s not in self.present]
        if missing:
            raise SplitError(f"dataset {self.manifest['dataset']} ({self.dataset_dir}) has no split {missing} (splits: {self.present})")
        for split in splits:
            if split not in self._cache:
                self._cache[split] = read_samples(self.dataset_dir, [split])
        return [(split, record) for split in splits for record in self._cache[split]]


def scored_splits(facts: list[RunFacts], split: str, dataset_dir: Path, test_splits: list[str]) -> dict[str, ScoredSplit]:
    """Run name → the memes it is scored on under `split` (see the module docstring)."""
    reader = SplitReader(dataset_dir)
    result = {}
    for run in facts:
        if split == "auto":
            result[run.name] = _held_out(run, reader) if run.fold is not None else _test_split(run, reader, test_splits)
            result[run.name].baselines = _baselines_on(run, reader, result[run.name])
        else:
            result[run.name] = _explicit(run, reader, split)
        result[run.name].calibrators = run.calibrators
    return result


def _baselines_on(run: RunFacts, reader: SplitReader, scored: ScoredSplit) -> dict[str, Any] | None:
    """The baselines the run measured on its test stage, when these scored memes are that stage (its dataset, as many
    memes): each kind's name, rule and scores."""
    from crossmod.results.baselines import read

    measured = read(run.run_dir) if run.run_dir is not None else None
    if not measured or _run_dataset(run) != reader.manifest["dataset"] or measured["memes"].get("test") != len(scored.records):
        return None
    return {kind: {k: row[k] for k in ("name", "rule", "test") if k in row} for kind, row in measured["rows"].items() if "test" in row}


def _fold_entry(run: RunFacts) -> dict[str, Any]:
    """The run's fold assignment, from the manifest copy in its folder (the dataset as it trained on it)."""
    if run.run_dir is None:
        raise SplitError(
            f"{run.source}: exported from fold {run.fold} of {run.num_folds}, but this export holds no fold assignment "
            "(no manifest.json beside its card: exported by an older crossmod)",
            "re-export the run (crossmod export run=<run dir>), evaluate the run folder for its held-out fold, or give split= explicitly",
        )
    manifest_path = run.run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} is missing: fold run {run.name} cannot name its held-out fold; give split= explicitly")
    manifest = read_manifest(run.run_dir)
    splits = sorted(set(_data_setting(run, "train_splits")))
    seed = _data_setting(run, "fold_seed")
    entry = find_folds(manifest, run.num_folds, seed, splits)
    if entry is None:
        raise ValueError(
            f"{manifest_path}: no fold assignment for num_folds={run.num_folds}, seed={seed}, splits={splits} (run {run.name})"
        )
    return {**entry, "dataset": manifest["dataset"], "fingerprint": manifest.get("fingerprint"), "manifest_path": manifest_path}


def _named(manifest: dict[str, Any]) -> str:
    fingerprint = manifest.get("fingerprint")
    return f"{manifest['dataset']} [{fingerprint}]" if fingerprint else manifest["dataset"]


def _held_out(run: RunFacts, reader: SplitReader) -> ScoredSplit:
    """Exactly the run's held-out fold, after checking the evaluated dataset is the one the run was trained on."""
    entry = _fold_entry(run)
    evaluated = reader.manifest["dataset"]
    other_dataset = (
        f"fold run {run.name} was trained on dataset {_named(entry)} ({entry['manifest_path']}), but the evaluated "
        f"dataset is {_named(reader.manifest)} ({reader.dataset_dir})"
    )
    if entry["dataset"] != evaluated:
        raise SplitError(f"{other_dataset}: its held-out fold is not in it; give split= explicitly to score these memes")
    absent = [s for s in entry["splits"] if s not in reader.present]
    if absent:
        raise SplitError(f"{other_dataset}, which has no split {absent}: give split= explicitly to score these memes")
    assignment = entry["assignment"]
    records = reader.read(entry["splits"])
    groups = {r["group"] for _, r in records}
    unknown, unseen = sorted(groups - set(assignment)), sorted(set(assignment) - groups)
    if unknown or unseen:
        differences = [f"{len(unknown)} groups the run's fold assignment lacks, e.g. {unknown[:3]}"] if unknown else []
        differences += [f"{len(unseen)} of the run's groups missing, e.g. {unseen[:3]}"] if unseen else []
        raise SplitError(f"{other_dataset}, with other groups ({'; '.join(differences)}): give split= explicitly to score these memes")
    _check_copy(run, entry, reader)
    held = [r for _, r in records if assignment[r["group"]] == run.fold]
    expected = entry["samples_per_fold"][run.fold]
    if len(held) != expected:
        raise SplitError(f"{other_dataset}: its fold {run.fold} has {len(held)} memes, the run's had {expected}; give split= explicitly")
    return ScoredSplit(held, f"held-out fold {run.fold} of {run.num_folds}", "auto", run.selection)


def _check_copy(run: RunFacts, entry: dict[str, Any], reader: SplitReader) -> None:
    """The run folder's fold entry is the dataset's own: same splits, fold sizes and group → fold, group for group."""
    stored_in = f"{reader.dataset_dir}/manifest.json"
    key = f"num_folds={run.num_folds}, seed={entry['seed']} over {entry['splits']}"
    fix = "evaluate the run's original folder, or give split= explicitly (evaluate.py then counts the scored memes the run trained on)"
    stored = find_folds(reader.manifest, run.num_folds, entry["seed"], entry["splits"])
    if stored is None:
        raise SplitError(
            f"{entry['manifest_path']}: fold run {run.name}'s fold assignment ({key}) is not among those the dataset stores in "
            f"{stored_in}: its held-out fold cannot be checked",
            fix,
        )
    moved = sorted(g for g, k in entry["assignment"].items() if stored["assignment"].get(g) != k)
    if moved or stored["samples_per_fold"] != entry["samples_per_fold"] or len(stored["assignment"]) != len(entry["assignment"]):
        raise SplitError(
            f"{entry['manifest_path']}: fold run {run.name}'s fold assignment ({key}) differs from the dataset's own in "
            f"{stored_in}: {len(moved)} groups in other folds (e.g. {moved[:3]}), fold sizes {entry['samples_per_fold']} "
            f"vs {stored['samples_per_fold']}; its held-out fold would hold memes it trained on",
            fix,
        )


def _test_split(run: RunFacts, reader: SplitReader, test_splits: list[str]) -> ScoredSplit:
    present = [s for s in test_splits if s in reader.present]
    if not present:
        raise SplitError(
            f"run {run.name} is not a fold run, so split=auto scores the dataset's test split (data.test_splits="
            f"{list(test_splits)}), but dataset {reader.manifest['dataset']} ({reader.dataset_dir}) has only the splits "
            f"{reader.present}: give split= explicitly (one of them, or all = every split), minding which of them the run trained on"
        )
    records = [r for _, r in reader.read(present)]
    return ScoredSplit(records, f"split {'+'.join(present)}", "auto", run.selection)


def _explicit(run: RunFacts, reader: SplitReader, split: str) -> ScoredSplit:
    splits = reader.present if split == "all" else [split]
    if split != "all" and split not in reader.present:
        hint = f"; leave split= out (split=auto) to score fold run {run.name} on its held-out fold" if run.fold is not None else ""
        raise SplitError(
            f"dataset {reader.manifest['dataset']} ({reader.dataset_dir}) has no split {split!r} (splits: {reader.present}){hint}"
        )
    records = reader.read(splits)
    scored = ScoredSplit([r for _, r in records], f"split {split}", split, run.selection)
    scored.warning, scored.trained_on, scored.selected_on = _seen_warning(run, reader, records, split)
    if scored.warning:
        log.warning("WARNING — %s", scored.warning)
    return scored


def _run_dataset(run: RunFacts) -> str | None:
    path = run.run_dir / "manifest.json" if run.run_dir else None
    return read_manifest(run.run_dir)["dataset"] if path and path.is_file() else None


def _seen_warning(run: RunFacts, reader: SplitReader, records: list[tuple[str, dict[str, Any]]], split: str) -> tuple[str | None, int, int]:
    """Say loudly how many of the scored memes the run trained on or chose its weights on (the warning, and both counts)."""
    if run.run_dir is None or _run_dataset(run) != reader.manifest["dataset"]:
        return None, 0, 0  # another dataset (or unknown training data): nothing to count
    rule = (run.selection or {}).get("rule")
    val_splits = set(_data_setting(run, "val_splits")) if rule in ("dataset_val", "val_split") else set()
    selected = sum(1 for s, _ in records if s in val_splits)
    if run.fold is not None:
        entry = _fold_entry(run)
        # under the inner rule the selection memes are groups of the training folds: counted as chosen on, not trained on
        stored = find_inner_validation(entry, run.fold, float(_data_setting(run, "inner_share"))) if rule == "inner" else None
        inner = set(stored["groups"]) if stored else set()
        outside = [r for s, r in records if s in entry["splits"] and entry["assignment"].get(r["group"], run.fold) != run.fold]
        selected += sum(1 for r in outside if r["group"] in inner)
        seen = len(outside) - sum(1 for r in outside if r["group"] in inner)
        what = f"fold run {run.name} (held-out fold {run.fold} of {run.num_folds})"
        verb, hint = "trained on", "leave split= out (split=auto) to score its held-out fold only"
    else:
        seen = sum(1 for s, _ in records if s in set(_data_setting(run, "train_splits")))
        what, verb, hint = f"run {run.name}", "trained on", "score its test split instead"
    parts = [f"{verb} {seen} of these {len(records)} memes"] if seen else []
    parts += [f"chose its weights on {selected} of them (rule {rule})"] if selected else []
    if not parts:
        return None, 0, 0
    return f"split={split}: {what} {' and '.join(parts)}: these are not held-out scores; {hint}.", seen, selected

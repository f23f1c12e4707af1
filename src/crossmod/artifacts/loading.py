"""One loader for everything that holds a trained classifier: `load(reference) → (model, info)`.

A reference is a run folder (its selected or named checkpoint), a Lightning .ckpt, a DeepSpeed checkpoint directory,
a consolidated safetensors file or the `adapter/` inside a run folder, an exported culture folder (head or retrieval
adapter), or, for `each_model`, a folder of runs. Adapter folders, whoever wrote them, are read through one protocol
(src/crossmod/artifacts/adapter_folder.py). Everything read is data, never code: run configs, checkpoint hyperparameters and
exported configs are checked against crossmod's own model parts (src/crossmod/models/trusted_targets.py) before anything
is built, exported folders hold safetensors only, and their paths resolve inside them (src/crossmod/artifacts/bases.py).
Every job that scores a trained model (evaluate, predict, export, eval_data, retrieval_db) loads it here.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from crossmod.artifacts import adapter_folder
from crossmod.artifacts.adapter_folder import REEXPORT, ExportError, check_fits, load_weights
from crossmod.artifacts.bases import BaseModelError, check_card_bases, missing_local_bases, override_keys, resolve_bases, with_bases
from crossmod.artifacts.consolidate import is_deepspeed_checkpoint, restore_weights, zero_state_dict
from crossmod.artifacts.culture_folders import read_card, read_object
from crossmod.artifacts.runs import read_config
from crossmod.data.paths import OutsideRoot, ensure_within
from crossmod.models.module import MemeClassifier, with_components
from crossmod.models.trusted_targets import MODEL_ROOT, check_trusted
from crossmod.runtime.user_errors import UserError, error_chain

Bases = Mapping[str, str | None] | None


class NothingToLoad(UserError, FileNotFoundError):
    """The reference is none of the things a trained classifier is kept in."""


def load(
    reference: str | Path,
    checkpoint: str | None = None,
    *,
    sharded: bool = False,
    bases: Bases = None,
    command: str | None = None,
    retrieval_bank: bool = True,
    expect: str | None = None,
) -> tuple[MemeClassifier, dict[str, Any]]:
    """The classifier a reference holds, in eval mode, and what is known about it (`info["kind"]`: run, checkpoint
    or culture; a run's `config`, `metrics`, `checkpoint` and `run_dir`; a culture's `card`).

    `checkpoint`: for a run folder, "best" (the default: the weights the run selected and scored), "last", or a path.
    A checkpoint inside a run folder loads as that run's checkpoint, so its config, base overrides and retrieval bank
    apply. `sharded`: read the weights now and put them in when Lightning builds the model in ZeRO-3 partitions.
    `bases`: `model.<key>` overrides for a base this machine holds elsewhere than the run or export names; `command`:
    the job's command line, which an error about a missing base names. `retrieval_bank`: a run that classifies by
    retrieval gets its bank (its training memes under the loaded weights, as its test stage had); jobs that build
    their own database from the run (export) skip it. `expect="culture"`: only an exported culture folder will do
    (predict and retrieval-db take exports): anything else is refused before it is read.
    """
    path = Path(reference)
    if expect == "culture" and not (path / "culture_card.json").is_file():
        raise NothingToLoad(f"{path}: not an exported culture folder (no culture_card.json); write one with crossmod export run=<run dir>")
    if (path / "culture_card.json").is_file():
        model, card = _culture(path, bases, command)
        return model, {"kind": "culture", "card": card, "folder": str(path)}
    run_dir = path if (path / "metrics.json").is_file() else _enclosing_run(path)
    if run_dir is not None:
        chosen = checkpoint or ("best" if run_dir == path else str(path))
        model, info = _run(run_dir, chosen, sharded, bases, command)
        info.update(kind="run", run_dir=str(run_dir))
        if retrieval_bank and model.scoring.needs_bank:
            _attach_training_bank(model, run_dir, info["config"], sharded)
        return model, info
    if path.is_file() and path.suffix == ".ckpt":
        return _checkpoint(path, sharded), {"kind": "checkpoint", "checkpoint": str(path)}
    found = adapter_folder.detect(path) if path.is_dir() else None
    if found == "run":
        raise NothingToLoad(f"{path}: a run's adapter/ outside its run folder, which holds the config that rebuilds its base: load the run folder, or a folder crossmod export wrote")
    if found == "peft":
        raise NothingToLoad(
            f"{path}: a PEFT adapter without crossmod's heads (no heads.json, no culture_card.json), so no classifier to build; "
            "a VLM scored by its answers takes it: crossmod memebridge memebridge.adapter=<folder>"
        )
    if path.exists():
        raise NothingToLoad(
            f"{path}: not a run folder (metrics.json), a .ckpt, an exported culture folder (culture_card.json), or a "
            "DeepSpeed checkpoint or consolidated file inside a run folder (which holds the config to rebuild it)"
        )
    raise NothingToLoad(f"{path} does not exist")


def each_model(
    reference: str | Path, sharded: bool = False, bases: Bases = None, command: str | None = None
) -> list[tuple[str, Callable[[], Any]]]:
    """(name, loader) for what `load` takes, or for every run under a folder. Each loader builds its model when called,
    so a folder of runs is scored one model at a time (peak memory: one model)."""
    path = Path(reference)
    if (path / "culture_card.json").is_file() or (path / "metrics.json").is_file():
        return [(path.name, functools.partial(_model_only, path, sharded, bases, command))]
    if path.is_file() or _enclosing_run(path):  # a checkpoint: named by its stem (a DeepSpeed directory's too)
        return [(path.stem, functools.partial(_model_only, path, sharded, bases, command))]
    runs = sorted(p.parent for p in path.rglob("metrics.json"))
    if not runs:
        raise NothingToLoad(f"{path}: no run (metrics.json), checkpoint or exported culture folder")
    return [(str(run.relative_to(path)), functools.partial(_model_only, run, sharded, bases, command)) for run in runs]


def _model_only(path: Path, sharded: bool, bases: Bases, command: str | None) -> Any:
    return load(path, sharded=sharded, bases=bases, command=command)[0]


def _enclosing_run(path: Path) -> Path | None:
    """The run folder a checkpoint file or DeepSpeed directory lies in (checkpoints/…), if any."""
    for parent in list(path.parents)[:3]:
        if (parent / "metrics.json").is_file() and (parent / "config.yaml").is_file():
            return parent
    return None


def _attach_training_bank(model: Any, run_dir: Path, config: dict[str, Any], sharded: bool) -> None:
    """A run that classifies by retrieval votes among its training memes: embedded under these weights (its training
    folds only), as the run's own test stage scored with."""
    if sharded:
        raise ValueError(f"{run_dir} classifies by retrieval: score it without ZeRO-3, or export it (crossmod export kind=retrieval)")
    from crossmod.artifacts.retrieval_db import run_training_bank

    model.use_bank(run_training_bank(run_dir, config, model))


def _run(run_dir: Path, checkpoint: str, sharded: bool, bases: Bases, command: str | None) -> tuple[MemeClassifier, dict[str, Any]]:
    """The run's best or last checkpoint (or a given checkpoint path) as a model, and the run's config.

    Lightning checkpoint files load as they are. DeepSpeed checkpoint directories and consolidated
    safetensors files (`crossmod consolidate`) hold weights only, often just the trainable
    ones: the model is rebuilt from the run's config (its base from its own folder) and they go on top.
    The run's config and a checkpoint's hyperparameters are checked before anything is built from them.
    `sharded`: the weights are read now, but the model is left for Lightning to build inside ZeRO-3's partitioned
    init (scoring under `strategy=deepspeed_zero3`), and the weights go in then, partition by partition.
    `bases`: the user's overrides (`{"text.name_or_path": <local copy>}`) for a base the run read from a folder this
    machine holds elsewhere; a base folder that is gone without one is named with `command`'s override.
    """
    config = OmegaConf.to_container(read_config(run_dir / "config.yaml"))
    changed = _given_bases(config, run_dir, bases, command or f"crossmod export run={run_dir}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    named = {"best": metrics["best_checkpoint"], "last": run_dir / "checkpoints" / "last.ckpt"}
    if not named["best"] and (metrics.get("selection") or {}).get("weights") == "final":
        named["best"] = named["last"]  # no selection (cv.selection=last, or a NaN monitor): the run scored its final weights
    # the run's own pointers (best, last) are read within the run; a path the user gives is the user's choice
    path = _inside_run(run_dir, named[checkpoint], checkpoint) if checkpoint in named else Path(checkpoint)
    if adapter_folder.detect(path) == "run" and path.resolve().parent == run_dir.resolve():
        model = _run_adapter(run_dir, path, config)
    elif is_deepspeed_checkpoint(path) or path.suffix == ".safetensors":
        check_trusted(config.get("model"), run_dir / "config.yaml", root=MODEL_ROOT)
        model = instantiate(with_components(config["model"]), _recursive_=False)
        fix = f"consolidate the checkpoint again (crossmod consolidate checkpoint=<checkpoint dir> output={path})"
        state = zero_state_dict(path) if path.is_dir() else load_weights(path, fix)
        _restore_when_built(model, state, sharded)
    elif path.is_file():
        model = _checkpoint(path, sharded, changed)
    else:
        raise NothingToLoad(f"{path} does not exist (checkpoint={checkpoint} of run {run_dir})", "give checkpoint=best, last, or a checkpoint file")
    return model.eval(), {"config": config, "metrics": metrics, "checkpoint": str(path)}


def _run_adapter(run_dir: Path, folder: Path, config: dict[str, Any]) -> MemeClassifier:
    """A run's own `adapter/` (an adapter folder, src/crossmod/artifacts/adapter_folder.py) on a fresh base built from
    the run's config, under the checks every adapter folder gets: verified first, every tensor exactly the base's."""
    adapter_folder.verify(folder)
    model_cfg = json.loads(json.dumps(config.get("model") or {}))
    check_trusted(model_cfg, run_dir / "config.yaml", root=MODEL_ROOT)
    if not isinstance(model_cfg.get("fusion"), dict):
        raise NothingToLoad(f"{run_dir / 'config.yaml'}: model.fusion is not an object; {folder} has no model to go onto")
    model_cfg["fusion"] = {**model_cfg["fusion"], "lora": None}  # the adapter comes from the folder
    model: MemeClassifier = instantiate(with_components(model_cfg), _recursive_=False)
    model.configure_model()
    adapter_folder.load(model, folder, {"base_model": model_cfg["fusion"].get("name_or_path")})
    return model


def _inside_run(run_dir: Path, pointer: str | Path, checkpoint: str) -> Path:
    """The checkpoint a run's own record (metrics.json's best checkpoint) or a given path names, inside the run folder.

    A run folder may come from someone else, so what it points to is data: a recorded path is read within the run (a
    path relative to the run, or the training machine's absolute path of one of its `checkpoints/`, which moved with
    it), and whatever it names, symlinks followed, must lie inside the run. Anything else is refused by name, never
    opened: an outside checkpoint would be scored, and exported, as this run's weights."""
    recorded = Path(pointer)
    where = f"checkpoint={checkpoint} of run {run_dir}"
    if not recorded.is_absolute():
        path = run_dir / recorded if not recorded.is_relative_to(run_dir) else recorded
    elif recorded.absolute().is_relative_to(run_dir.absolute()):
        path = recorded
    elif recorded.parent.name == "checkpoints":  # the run was moved: its checkpoints moved with it
        path = run_dir / "checkpoints" / recorded.name
    else:
        raise NothingToLoad(f"{where}: {recorded} lies outside the run folder; crossmod loads a run's checkpoints from inside it only")
    path = Path(os.path.normpath(path.absolute()))  # `..` resolved by name: the path checked is the path opened
    if not path.is_relative_to(os.path.normpath(run_dir.absolute())):
        raise NothingToLoad(f"{where}: {pointer} leads outside the run folder; crossmod loads a run's checkpoints from inside it only")
    try:
        return ensure_within(run_dir, path, "checkpoint", str(pointer))
    except OutsideRoot as error:
        raise NothingToLoad(f"{where}: {error}") from None


def _given_bases(config: dict[str, Any], run_dir: Path, bases: Mapping[str, str | None] | None, command: str) -> dict[str, Any]:
    """Apply base overrides to the run's model config (in place); the top-level model settings they changed, as the
    keyword arguments a checkpoint's hyperparameters are loaded with. A base folder the run read that is no longer
    there, and that no override replaces, stops here naming the key and the job's own command."""
    model_cfg = config.get("model") or {}
    before = json.loads(json.dumps(model_cfg))
    given = with_bases(model_cfg, bases, run_dir / "config.yaml")
    missing = [(key, value) for key, value in missing_local_bases(model_cfg) if key not in given]
    if missing:
        key, value = missing[0]
        raise BaseModelError(
            f"{run_dir}: its base model.{key}={value} is not on this machine. Give this machine's copy: {command} model.{key}=<local copy>"
        )
    return {key: value for key, value in model_cfg.items() if before.get(key) != value}


def _checkpoint(path: Path, sharded: bool = False, changed: Mapping[str, Any] | None = None) -> MemeClassifier:
    """A Lightning .ckpt's classifier, in eval mode: built and loaded now, or (`sharded`) read now and left for
    Lightning to build in ZeRO-3 partitions, its weights going in then. `changed`: hyperparameters to load it with."""
    if sharded:
        model, state = MemeClassifier.unbuilt_from_checkpoint(path)
        _restore_when_built(model, state, sharded)
        return model.eval()
    return MemeClassifier.load_from_checkpoint(path, map_location="cpu", **(changed or {})).eval()


def _restore_when_built(model: MemeClassifier, state: dict[str, torch.Tensor], sharded: bool) -> None:
    """Build now and restore, or (sharded) restore right after Lightning builds the model in partitions."""
    if sharded:
        model.when_built(lambda built: restore_weights(built, state))
    else:
        model.configure_model()
        restore_weights(model, state)


def _culture(
    folder: str | Path, bases: Mapping[str, str | None] | None = None, command: str | None = None
) -> tuple[MemeClassifier, dict[str, Any]]:
    """Rebuild an exported culture's classifier (fresh base + adapter, or the saved classifier weights).

    The folder is data: its configs are checked (src/crossmod/models/trusted_targets.py) before anything is built, and its
    bases resolved inside it (src/crossmod/artifacts/bases.py). `bases`: the user's overrides, by model_config key
    (`{"name_or_path": <local copy>}`), for a base the folder names but this machine holds elsewhere; `command`: the
    calling job's command line up to that override, which an error about a missing base names.
    """
    folder = Path(folder)
    adapter_folder.verify(folder)
    card = read_card(folder / "culture_card.json")
    model_cfg = read_object(folder / "model_config.json")
    check_trusted(card.get("heads"), folder / "culture_card.json")
    check_trusted(model_cfg, folder / "model_config.json", root=MODEL_ROOT)
    keys = override_keys(model_cfg)
    command = command or f"crossmod predict adapters={folder}"
    recorded = json.loads(json.dumps(model_cfg))
    resolve_bases(model_cfg, folder, bases, command)  # a path that leaves the folder is refused first, by its key
    check_card_bases(card, recorded, folder, REEXPORT, {key for key, value in (bases or {}).items() if value is not None})
    model_cfg["heads"] = card["heads"]
    lora = card["format"] == "peft-lora"
    if not isinstance(model_cfg.get("fusion", {}), dict):
        raise ExportError(f"{folder / 'model_config.json'}: fusion is not an object", REEXPORT)
    if lora:
        model_cfg["fusion"] = {**model_cfg["fusion"], "lora": None, "heads": card["heads"]}
    elif "heads" in model_cfg.get("fusion", {}):
        model_cfg["fusion"] = {**model_cfg["fusion"], "heads": card["heads"]}
    try:
        model: MemeClassifier = instantiate(with_components(model_cfg), _recursive_=False)
        model.configure_model()
    except Exception as error:  # Transformers' OSError (not on the hub, offline, not a model folder), maybe wrapped by Hydra
        cause = next((e for e in error_chain(error) if isinstance(e, OSError)), None)
        if cause is None:
            raise
        fixes = " or ".join(f"model.{key}=<local copy>" for key in keys)
        raise BaseModelError(f"{folder}: cannot load its base model ({cause}). Give this machine's copy: {command} {fixes}") from error
    if lora:
        adapter_folder.load_peft(model, folder, card)
    else:
        path = folder / "model.safetensors"
        backbone = {k: v for k, v in model.state_dict().items() if k.startswith("backbone.")}
        model.load_state_dict(check_fits(load_weights(path), backbone, path, card), strict=False)
    adapter_folder.load_head(model, folder, card)
    if card.get("kind") == "retrieval":
        from crossmod.artifacts.retrieval_db import attach

        attach(model, folder, card)
    return model.eval(), card

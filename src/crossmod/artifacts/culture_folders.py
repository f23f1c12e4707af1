"""What a trained run ships: per-culture folders (adapter or classifier weights, head, card) and their cards.

A culture folder is an adapter folder (src/crossmod/artifacts/adapter_folder.py: `adapter_config.json` +
`adapter_model.safetensors`, `head.safetensors` with this culture's rows of the head layers, `heads.json`), or, for a
model without LoRA, `model.safetensors` (the classifier's backbone) beside the same head files. With them:
`model_config.json` (the family config to rebuild it, its bases portable: hub ids or small bases shipped in `base/`, see
src/crossmod/artifacts/bases.py), `culture_card.json` and a README. Loading verifies the folder as every adapter folder
is verified, and refuses configs that name anything but crossmod's own model parts
(src/crossmod/models/trusted_targets.py): a folder or a run someone shares is data, never code.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from crossmod.artifacts import adapter_folder
from crossmod.artifacts.adapter_folder import HEAD_FILE, HEADS_FILE, REEXPORT, ExportError
from crossmod.artifacts.bases import (
    absolute_paths,
    card_base,
    portable_bases,
    without_machine_paths,
)
from crossmod.artifacts.export_readme import readme
from crossmod.data.cache_files import save_weights, shared_permissions
from crossmod.data.heads import GROUP_SEPARATOR
from crossmod.data.shards import write_json_atomic
from crossmod.models.backbone import Generative
from crossmod.models.module import MemeClassifier
from crossmod.models.trusted_targets import MODEL_ROOT
from crossmod.runtime.redaction import redact
from crossmod.runtime.user_errors import UserError

LABEL_MAP = {"0": "non-hate", "1": "hate"}
FORMATS = ("peft-lora", "classifier")
KINDS = ("head", "retrieval")  # how the folder scores: its head layers, or its labelled memes (src/crossmod/artifacts/retrieval_db.py)
CARD_FIELDS: dict[str, type] = {"culture": str, "heads": dict, "format": str}


def read_object(path: Path, fix: str = REEXPORT) -> dict[str, Any]:
    """A JSON file that must hold an object, or an error naming the file (never its content)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{path} is missing", fix) from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ExportError(f"{path}: not JSON ({type(error).__name__} at {getattr(error, 'pos', '?')})", fix) from None
    if not isinstance(content, dict):
        raise ExportError(f"{path}: holds a JSON {type(content).__name__}, not an object", fix)
    return content


def read_card(path: Path) -> dict[str, Any]:
    """`culture_card.json` with the fields loading needs, each of its type."""
    card = read_object(path)
    for field, kind in CARD_FIELDS.items():
        if not isinstance(card.get(field), kind) or not card[field]:
            found = "missing" if field not in card else f"{card[field]!r}"[:80]
            raise ExportError(f"{path}: {field} is {found}, not a non-empty {'object' if kind is dict else 'string'}", REEXPORT)
    if card.get("kind", "head") not in KINDS:
        raise ExportError(f"{path}: kind is {card.get('kind')!r}"[:200] + f", not one of {list(KINDS)}", REEXPORT)
    if card["format"] not in FORMATS:
        raise ExportError(f"{path}: format is {card['format']!r}"[:200] + f", not one of {list(FORMATS)}", REEXPORT)
    bad = [name for name, head in card["heads"].items() if not isinstance(head, dict)]
    if bad:
        raise ExportError(f"{path}: heads.{bad[0]} is not an object (e.g. {{kind: binary}})", REEXPORT)
    calibration = card.get("calibration")
    temperature = calibration.get("temperature") if isinstance(calibration, dict) else None
    usable = isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and 0 < temperature < float("inf")
    if calibration is not None and not usable:
        raise ExportError(f"{path}: calibration.temperature is {temperature!r}"[:200] + ", not a number above 0", REEXPORT)
    if isinstance(calibration, dict) and "calibrator" in calibration:  # older cards carry the temperature only
        from crossmod.evaluation.calibration import check_calibrator

        try:
            check_calibrator(calibration["calibrator"])
        except ValueError as error:
            raise ExportError(f"{path}: calibration.{error}", REEXPORT) from None
    _check_policy(card.get("policy"), path)
    return card


def _check_policy(policy: Any, path: Path) -> None:
    """A card's policy: a name and, per action (act, review), a threshold in [0, 1] or the reason it has none."""
    if policy is None:
        return
    actions = policy.get("actions") if isinstance(policy, dict) else None
    if not isinstance(actions, dict) or not isinstance(policy.get("name"), str):
        raise ExportError(f"{path}: policy needs a name and actions", REEXPORT)
    for action, record in actions.items():
        threshold = record.get("threshold") if isinstance(record, dict) else None
        number = isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and 0 <= threshold <= 1
        if action not in ("act", "review") or not (number or (isinstance(record, dict) and isinstance(record.get("why"), str))):
            raise ExportError(f"{path}: policy.actions.{action}"[:200] + " is not an action with a threshold in [0, 1] (or why it has none)", REEXPORT)


def _head_slice(model: MemeClassifier, culture: str) -> dict[str, torch.Tensor]:
    """The culture's rows of the head layers: the `linear` weights of a one-head model."""
    layers = model.head_layers
    rows = layers.rows(culture)
    return {name: tensor[rows].detach().cpu().contiguous() for name, tensor in layers.linear.state_dict().items()}


def fold_metrics(run_dir: Path, experiment: str, culture: str) -> dict[str, Any]:
    """Held-out metrics of this culture in every fold of the run's cross-validation (sibling runs)."""
    folds = {}
    for path in sorted(run_dir.parent.glob("*/fold_result.json")):
        result = json.loads(path.read_text())
        if result.get("experiment") == experiment and culture in result.get("held_out", {}):
            folds[str(result["fold"])] = result["held_out"][culture]
    return folds


def export_culture(
    model: MemeClassifier,
    info: dict[str, Any],
    run_dir: Path,
    culture: str,
    out: Path,
    merge: bool = False,
    ship_base_mb: float = 64,
    kind: str = "head",
) -> Path:
    """Write the culture's folder; its bases named portably (hub ids, or local folders up to `ship_base_mb` MiB shipped
    inside). `kind=retrieval`: also the culture's database of labelled training memes, which then scores.

    The folder is written under a fresh name beside `out` and renamed into place once whole: a failed export leaves
    no half-written folder (an earlier export there stays until the new one is complete), and no file the export
    writes can follow a link planted in the old folder."""
    _check_exportable(model, culture, kind)
    return staged_folder(out, lambda staging: _write_culture(model, info, run_dir, culture, staging, merge, ship_base_mb, kind))


def staged_folder(out: Path, write: Callable[[Path], None]) -> Path:
    """`write` fills a fresh folder beside `out`, which is renamed into place once whole: a failed export leaves no
    half-written folder (an earlier one there stays until the new one is complete)."""
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    remove_path(staging)
    staging.mkdir(parents=True)
    try:
        write(staging)
    except BaseException:
        remove_path(staging)
        raise
    shared_permissions(staging)
    replace_folder(staging, out)
    return out


def culture_baselines(baselines: dict[str, Any] | None, culture: str) -> dict[str, Any]:
    """Each baseline's name, rule and this culture's scores per stage (the run's metrics.json `baselines.rows`)."""
    rows = (baselines or {}).get("rows") or {}
    return {
        kind: {"name": row.get("name"), "rule": row.get("rule"), **{s: (row.get(s) or {}).get(culture) for s in ("val", "test")}}
        for kind, row in rows.items()
    }


def trained_on(run_dir: Path, metrics: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The dataset and split rule the exported weights were trained and selected with."""
    manifest = json.loads((run_dir / "manifest.json").read_text()) if (run_dir / "manifest.json").is_file() else {}
    data, roles = config.get("data") or {}, manifest.get("split_roles") or {}  # the datamodule's defaults, as converted
    return {
        "dataset": manifest.get("dataset"),
        "fingerprint": manifest.get("fingerprint"),
        "fold": metrics.get("fold"),
        "num_folds": metrics.get("num_folds"),
        "fold_seed": data.get("fold_seed") if metrics.get("fold") is not None else None,
        "train_splits": data.get("train_splits") or roles.get("train"),
        "val_splits": data.get("val_splits") or roles.get("val"),
        "test_splits": data.get("test_splits") or roles.get("test"),
        "selection_rule": (metrics.get("selection") or {}).get("rule"),
        "manifest": "manifest.json" if manifest else None,
    }


def _portable_selection(selection: dict[str, Any] | None, run_dir: Path) -> dict[str, Any] | None:
    """The run's selection facts, its chosen checkpoint named within the run (`final` stays `final`)."""
    if not selection:
        return selection
    weights = selection.get("weights")
    return {**selection, "weights": _within_run(weights, run_dir) if weights and weights != "final" else weights}


def _within_run(checkpoint: str, run_dir: Path) -> str:
    """A checkpoint path as the run folder holds it (`checkpoints/epoch004.ckpt`), or its name when outside."""
    path = Path(checkpoint)
    try:
        return str(path.absolute().relative_to(run_dir.absolute()))
    except ValueError:
        return path.name


def remove_path(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def replace_folder(new: Path, out: Path) -> None:
    """Put the complete folder `new` in place of `out` (whatever `out` was: nothing, a folder, a link)."""
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.is_symlink() or out.exists():
        remove_path(old)
        os.replace(out, old)
    os.replace(new, out)
    remove_path(old)


class UnknownCulture(UserError, KeyError):
    """export.py culture=<not a head of the run>."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return Exception.__str__(self)


def _check_exportable(model: MemeClassifier, culture: str, kind: str) -> None:
    if culture not in model.heads:
        heads = list(model.heads)
        raise UnknownCulture(
            f"culture {culture!r} is not a head of this run (heads: {heads})",
            f"pass culture=<one of {heads}>, or leave it out to export every head",
            "culture",
        )
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    if kind == "retrieval" and (not model.heads[culture].is_binary or model.head_layers is None):
        raise ValueError(
            f"kind=retrieval exports a binary culture of a model with one shared meme embedding; {culture} of this run is not one"
        )


def _write_culture(
    model: MemeClassifier, info: dict[str, Any], run_dir: Path, culture: str, out: Path, merge: bool, ship_base_mb: float, kind: str
) -> None:
    # The model's own hyperparameters; secret-looking values never leave in a folder meant for sharing.
    model_cfg = redact(
        {
            "_target_": MODEL_ROOT,
            "_recursive_": False,
            **json.loads(json.dumps(dict(model.hparams), default=str)),
        }
    )
    # Where the training machine kept its image features is not the exported model's business: an export scores each
    # meme once, so it runs the tower (src/crossmod/models/vlm/cached_vision.py)
    (model_cfg.get("fusion") or {}).pop("vision_cache_dir", None)
    objective = model_cfg.get("objective") or {}
    if objective.get("groups"):  # annotator_groups: the culture's own group heads, the rows its head file holds
        model_cfg["objective"] = {**objective, "groups": [g for g in objective["groups"] if g.split(GROUP_SEPARATOR, 1)[0] == culture]}
    notes, base_provenance = portable_bases(model_cfg, out, ship_base_mb)
    for note in notes:
        print(f"[export] {culture}: {note}")
    leaks = absolute_paths(model_cfg)
    if leaks:  # a key crossmod does not know as a base: refuse rather than ship a path of this machine
        raise ValueError(f"model_config.json would hold absolute paths at {leaks}: crossmod cannot make them portable")
    backbone = model.backbone
    lora = hasattr(backbone, "save_adapter") and bool(model_cfg.get("fusion", {}).get("lora"))
    heads = {culture: model.hparams.heads[culture]}
    head = _head_slice(model, culture) if model.head_layers is not None else None
    if lora:
        adapter_folder.save(model, out, head=head, heads=heads)
        _portable_adapter_config(out / "adapter_config.json", model_cfg["fusion"]["name_or_path"])
        if merge:
            merged = _merged_copy(backbone)
            merged.save_pretrained(out / "merged", safe_serialization=True)
            model.preprocessor.processor.save_pretrained(out / "merged")
    else:
        state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k.startswith("backbone.")}
        save_weights(state, str(out / "model.safetensors"))
        if head is not None:
            save_weights(head, str(out / HEAD_FILE))
        (out / HEADS_FILE).write_text(json.dumps(heads, indent=1))
        if merge:
            _save_model_folder(model, out / "merged")
    (out / "model_config.json").write_text(json.dumps(model_cfg, indent=1, ensure_ascii=False))
    metrics, head = info["metrics"], model.heads[culture]
    card = {
        "culture": culture,
        "heads": heads,
        "label_map": LABEL_MAP if head.is_binary else list(head.classes),
        "family": model_cfg["fusion"]["_target_"],
        "format": "peft-lora" if lora else "classifier",
        "base_model": card_base(model_cfg),
        "base_revision": _revision(model),
        # each base the run read from a folder: its hub id and revision (a cache snapshot), or its folder name, what its
        # config declares and a SHA-256 of its files; hub ids are the base_model/base_revision above
        "base_provenance": base_provenance,
        "prompt": model_cfg.get("prompt"),
        "experiment": metrics.get("experiment"),
        "run": run_dir.name,  # the run's id; no path of the training machine leaves in an export
        "checkpoint": _within_run(info["checkpoint"], run_dir),
        "metrics": {stage: metrics["best"].get(stage, {}).get(culture) for stage in ("val", "test")},
        # what trained and selected these weights: the dataset (fingerprint), the fold and the selection rule; the run's
        # manifest copy beside the card holds the fold assignment, so evaluate.py split=auto scores exactly the held-out
        # memes and counts any scored meme the export trained or was selected on
        "trained_on": trained_on(run_dir, metrics, info["config"]),
        "selection": _portable_selection(metrics.get("selection"), run_dir),
        "metrics_per_fold": fold_metrics(run_dir, metrics.get("experiment"), culture),
        # the temperature fitted on the run's selection split, which predict applies beside the raw probability
        "calibration": culture_calibration(metrics.get("calibration"), culture),
        # the moderation policy's thresholds for this culture, chosen on the run's selection split (predict applies them)
        "policy": culture_policy(metrics.get("policy"), culture),
        # the baselines fitted on the same training memes, scored on the same memes as `metrics` (this culture's rows)
        "baselines": culture_baselines(metrics.get("baselines"), culture),
        "training_config": without_machine_paths(redact(info["config"])),
    }
    if (run_dir / "manifest.json").is_file():
        write_json_atomic(out / "manifest.json", without_machine_paths(json.loads((run_dir / "manifest.json").read_text())))
    _export_database(model, info, run_dir, culture, out, card, kind)
    (out / "culture_card.json").write_text(json.dumps(card, indent=1, ensure_ascii=False, default=str))
    (out / "README.md").write_text(readme(card))


def _export_database(
    model: MemeClassifier, info: dict[str, Any], run_dir: Path, culture: str, out: Path, card: dict[str, Any], kind: str
) -> None:
    """kind=retrieval: the run's labelled training memes under the exported weights (src/crossmod/artifacts/retrieval_db.py)."""
    from crossmod.artifacts.retrieval_db import (
        DB_FILE,
        IDS_FILE,
        UNSEEN_FILE,
        run_training_memes,
        unseen_content,
        vote_metrics,
        write_database,
    )

    card["kind"] = kind
    if kind != "retrieval":
        for name in (DB_FILE, IDS_FILE, UNSEEN_FILE):  # an earlier retrieval export of this folder must not linger
            (out / name).unlink(missing_ok=True)
        return
    database, unlabelled = run_training_memes(run_dir, info["config"], model, culture)
    source = {"from": f"the training memes of run {run_dir.name}", "memes": len(database.ids), "unlabelled_left_out": unlabelled}
    retrieval = {"k": model.retrieval_settings.k, "weighting": model.retrieval_settings.weighting}
    card["retrieval"] = {**retrieval, **write_database(out, database), "sources": [source]}
    # the run's held-out and selection memes by content, so `add` refuses them under any id
    card["retrieval"]["unseen"] = unseen_content(run_dir, info["config"], model, out, card)
    # the folder scores by its vote, so its card reports the vote's own numbers on the run's selection and held-out
    # memes; the run's (its scoring rule's, at its selected checkpoint) stay beside them, named
    settings = model.retrieval_settings
    voted = vote_metrics(run_dir, info["config"], model, culture, database, settings)
    card["run_metrics"] = {"scored_by": model.scoring.name, **card["metrics"]}  # `head` or `retrieval`: the run's rule
    card["metrics"] = voted
    card["scored_by"] = (
        f"this folder's retrieval vote (k={settings.k}, {settings.weighting} weighting) over its {len(database.ids)} "
        "training memes, on the run's selection (val) and held-out (test) memes"
    )


def culture_calibration(calibration: dict[str, Any] | None, culture: str) -> dict[str, Any] | None:
    """The culture's calibration map (the run's `calibration=`; its temperature too), its rule and the run's held-out
    scores before and after it; None without one."""
    row = ((calibration or {}).get("heads") or {}).get(culture)
    if not row:
        return None
    from crossmod.evaluation.calibration import calibrator_of

    calibrator = calibrator_of(row)
    return {
        "method": calibrator["method"],
        "calibrator": calibrator,
        "temperature": row["temperature"],
        "rule": calibration["rule"],
        "bins": calibration["bins"],
        "test": {"before": row["before"], "after": row["after"]},
    }


def culture_policy(policy: dict[str, Any] | None, culture: str) -> dict[str, Any] | None:
    """The policy's name, targets and rule, with this culture's thresholds (or why a target was unreachable)."""
    if not policy or culture not in (policy.get("heads") or {}):
        return None
    return {"name": policy["name"], "targets": policy["targets"], "rule": policy["rule"], "actions": policy["heads"][culture]}


def _portable_adapter_config(path: Path, base: str) -> None:
    """PEFT records the base it was trained on; the export names it as model_config.json does, never by this machine's path."""
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = base
    path.write_text(json.dumps(config, indent=2))


def _save_model_folder(model: MemeClassifier, folder: Path) -> None:
    """A fully fine-tuned VLM as a Transformers model folder (weights, config, processor): what `from_pretrained`,
    and crossmod's `model.name_or_path`, load as a base."""
    if not isinstance(model.backbone, Generative):
        raise ValueError(
            "merge=true writes a model folder of a VLM run (LoRA merged in, or fully fine-tuned); this run's backbone is not one"
        )
    model.backbone.base_model().save_pretrained(folder, safe_serialization=True)
    model.preprocessor.processor.save_pretrained(folder)


def _merged_copy(backbone: Any) -> Any:
    """The base with the adapter folded in, for deployment without PEFT (the trained model stays intact)."""
    import copy

    return copy.deepcopy(backbone.model).merge_and_unload()


def _revision(model: MemeClassifier) -> str | None:
    """The base's Hub revision, when it came from the Hub (a VLM's; None for a local folder or another backbone)."""
    if not isinstance(model.backbone, Generative):
        return None
    return getattr(model.backbone.base_model().config, "_commit_hash", None)  # Transformers sets it for Hub downloads only

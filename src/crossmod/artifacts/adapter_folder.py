"""The adapter folder: one format for every LoRA adapter crossmod writes or reads, and one protocol for it.

A run's `adapter/` (written after its test stage), an exported culture folder (`crossmod export`) and the LoRA folder
MemeBridge scores (`memebridge.adapter`) hold one format:
- `adapter_config.json` + `adapter_model.safetensors`: PEFT's own files, so `PeftModel.from_pretrained(base, folder)`
  loads them without crossmod;
- `head.safetensors`: the head layers' `linear` weights (every head of a run, the one culture's rows in an export); a
  model without head layers (a VLM scored by its answer) has none;
- `heads.json`: the heads those weights belong to.

The protocol: `detect` says which of crossmod's folders a path is; `save` writes the format (collectively under
ZeRO-3); `verify` is the one trust check before anything is read (files inside the folder, no pickle, every
safetensors header within bounds); `load` puts a folder onto a fresh base, every tensor exactly the base's. A folder
someone shares is data, never code.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from crossmod.artifacts.consolidate import WeightsMismatch
from crossmod.data.cache_files import save_weights
from crossmod.data.paths import OutsideRoot, ensure_within
from crossmod.models.backbone import Adapters
from crossmod.models.sharding import gathered
from crossmod.runtime.user_errors import UserError

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")
HEAD_FILE = "head.safetensors"
HEADS_FILE = "heads.json"
OLD_HEAD_FILE = "heads.safetensors"  # a run's adapter/ before the formats were one: the same weights, keys under "linear."
CARD_FILE = "culture_card.json"
FILES = (CARD_FILE, "model_config.json", "model.safetensors", HEAD_FILE, HEADS_FILE, OLD_HEAD_FILE, *PEFT_FILES)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
MAX_HEADER = 100_000_000  # safetensors' own bound on a header; a larger claim is a "header bomb"
REEXPORT = "re-export the run (crossmod export run=<run dir>), and copy the folder whole (its files, not links to them)"


class ExportError(UserError, ValueError):
    """An adapter or culture folder (or a weights file) crossmod will not load: names the file, the field and the fix."""


def detect(folder: str | Path) -> str | None:
    """Which of crossmod's folders this is: "culture" (an export: its card), "run" (a run's `adapter/`: PEFT files and
    the heads), "peft" (PEFT files alone: a LoRA for a model scored by its answers), or None."""
    folder = Path(folder)
    if (folder / CARD_FILE).is_file():
        return "culture"
    if not (folder / PEFT_FILES[0]).is_file():
        return None
    return "run" if (folder / HEADS_FILE).is_file() else "peft"


def verify(folder: Path, fix: str = REEXPORT) -> None:
    """The one trust check, before anything in the folder is read: its files resolve inside it (a symlink out would
    read, print or load a file elsewhere), it holds no pickle (one offered as weights could run code on load), and each
    safetensors file's header fits in the file."""
    for name in FILES:
        try:
            ensure_within(folder, folder / name, "file", name)
        except OutsideRoot as error:
            raise ExportError(f"{folder}: {error}", fix) from None
    pickles = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ExportError(
            f"{folder} holds pickle files {pickles}: crossmod loads safetensors only (convert them with safetensors, or "
            "re-export the run (crossmod export run=<run dir>))"
        )
    for name in FILES:
        if name.endswith(".safetensors") and (folder / name).is_file():
            check_safetensors(folder / name, fix)


def save(
    model: Any, folder: str | Path, *, head: Mapping[str, torch.Tensor] | None = None, heads: Mapping[str, Any] | None = None, write: bool = True
) -> Path:
    """The model's LoRA adapter, head weights and heads, in the format. `head`/`heads`: an export's one culture (its
    rows, its declaration); by default every head. Under ZeRO-3 every rank calls this (the trainable weights are
    gathered collectively); only the rank with `write=True` writes."""
    if not isinstance(model.backbone, Adapters):
        raise ValueError(f"{type(model.backbone).__name__} has no adapter to save")
    folder = Path(folder)
    with gathered([p for p in model.parameters() if p.requires_grad]):
        if write:
            model.backbone.save_adapter(folder)
            if model.head_layers is not None:
                weights = head if head is not None else model.head_layers.linear.state_dict()
                save_weights({k: v.detach().cpu().contiguous() for k, v in weights.items()}, str(folder / HEAD_FILE))
            (folder / HEADS_FILE).write_text(json.dumps(dict(heads if heads is not None else model.hparams.heads), indent=1))
    return folder


def load(model: Any, folder: str | Path, named: Mapping[str, Any], fix: str = REEXPORT) -> None:
    """A folder of the format onto the model's fresh (adapter-free) base: verified, then the adapter and, for a model
    with head layers, the head weights. `named`: what names the base in messages (`base_model`)."""
    folder = Path(folder)
    verify(folder, fix)
    load_peft(model, folder, named, fix)
    load_head(model, folder, named, fix)


def load_peft(model: Any, folder: Path, named: Mapping[str, Any], fix: str = REEXPORT) -> None:
    """The PEFT adapter, every tensor of its file taken: PEFT itself loads an adapter for another base with missing or
    unused keys (a warning at most), which would score the bare base under the folder's name."""
    from peft import get_peft_model_state_dict

    for name in PEFT_FILES:
        if not (folder / name).is_file():
            raise ExportError(f"{folder / name} is missing: an adapter folder holds {' and '.join(PEFT_FILES)} (PEFT's files)", fix)
    path = folder / PEFT_FILES[1]
    saved = load_weights(path, fix)
    try:
        model.backbone.load_adapter(folder)
    except RuntimeError as error:  # torch's "size mismatch for …" from PEFT's load_state_dict
        reason = str(error).strip().splitlines()[-1].strip()
        raise WeightsMismatch(f"{path}: does not fit the base {named.get('base_model')!r} its card names: {reason}", fix) from None
    check_fits(saved, get_peft_model_state_dict(model.backbone.model), path, named, fix)


def load_head(model: Any, folder: Path, named: Mapping[str, Any], fix: str = REEXPORT) -> None:
    """The head weights onto the model's head layers (a model without them takes none)."""
    if model.head_layers is None:
        return
    linear = model.head_layers.linear
    path = folder / HEAD_FILE
    if not path.is_file() and (folder / OLD_HEAD_FILE).is_file():
        path = folder / OLD_HEAD_FILE
        state = {key.removeprefix("linear."): value for key, value in load_weights(path, fix).items()}
    elif not path.is_file():
        raise ExportError(f"{path} is missing: the model has head layers, and their weights are kept there", fix)
    else:
        state = load_weights(path, fix)
    linear.load_state_dict(check_fits(state, linear.state_dict(), path, named, fix))


def check_fits(
    state: dict[str, torch.Tensor], expected: Mapping[str, torch.Tensor], path: Path, named: Mapping[str, Any], fix: str = REEXPORT
) -> dict[str, torch.Tensor]:
    """`state` when it holds exactly the weights `expected` names, each of its shape: weights for another base (or
    another family) are refused by name, never half-loaded beside random ones."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = [f"{k} {tuple(state[k].shape)} (the model's {tuple(expected[k].shape)})" for k in sorted(set(state) & set(expected)) if state[k].shape != expected[k].shape]
    if missing or unexpected or shapes:
        found = "; ".join(
            f"{what} {', '.join(names[:3])}{' …' if len(names) > 3 else ''}"
            for what, names in (("lacks", missing), ("holds weights the model lacks:", unexpected), ("other shapes:", shapes))
            if names
        )
        raise WeightsMismatch(f"{path}: does not fit the base {named.get('base_model')!r} its card names: it {found}", fix)
    return state


def check_safetensors(path: Path, fix: str = REEXPORT) -> Path:
    """A safetensors file whose header fits in the file and under safetensors' bound (a header bomb claims more)."""
    with open(path, "rb") as handle:
        prefix, size = handle.read(8), os.fstat(handle.fileno()).st_size
    length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else None
    if length is None or length > min(MAX_HEADER, size - 8):
        claim = "no header length" if length is None else f"a header of {length:,} bytes"
        raise ExportError(f"{path}: claims {claim} in a file of {size:,} bytes (up to {MAX_HEADER:,}): not a safetensors file", fix)
    return path


def load_weights(path: Path, fix: str = REEXPORT) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors, with its name in any error (safetensors' own errors name no file)."""
    try:
        return load_file(str(check_safetensors(path, fix)))
    except SafetensorError as error:
        raise ExportError(f"{path}: not a readable safetensors file ({error})", fix) from None

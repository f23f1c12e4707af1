"""A model folder is data: before any `from_pretrained`, crossmod checks that the folder asks to run none of its own Python.

Transformers, given `trust_remote_code=False`, refuses an `auto_map` only for a model type it does not know; for a known
type (a Qwen2-VL `config.json`, a `tokenizer_config.json` naming a tokenizer class in the folder) it silently loads its
own class instead. Either way the folder was made to run code: crossmod refuses it, naming the file and the place, so
what the README promises (a folder with `auto_map` is refused) holds for every config a folder carries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_FILES = "*config*.json"  # config.json, tokenizer_config.json, processor_config.json, preprocessor_config.json …
MAX_CONFIG_BYTES = 64 << 20  # a config is kilobytes; a larger one is not parsed here (Transformers reports it)


class ShippedCodeError(ValueError):
    """A model folder whose configs name Python classes of its own (`auto_map`)."""


def local_folder(name_or_path: str | Path) -> Path | None:
    """The folder a name or path loads from on this machine: the folder itself, or a hub id's cached snapshot."""
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        return folder
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(name_or_path), "config.json")
    except Exception:  # noqa: BLE001 - not a hub id either: from_pretrained reports what it is
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def _auto_map_at(value: Any, place: str = "") -> str | None:
    """The key path of the first `auto_map` in a parsed config (nested configs included), or None."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "auto_map" and item:
                return f"{place}auto_map"
            found = _auto_map_at(item, f"{place}{key}.")
            if found:
                return found
    return None


def refuse_shipped_code(name_or_path: str | Path) -> None:
    """Raise ShippedCodeError when any config of the folder carries an `auto_map`; a folder that is not local passes."""
    folder = local_folder(name_or_path)
    if folder is None:
        return
    for path in sorted(folder.glob(CONFIG_FILES)):
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            continue
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not JSON: Transformers names the file when it reads it
        place = _auto_map_at(config)
        if place:
            raise ShippedCodeError(
                f"{path}: `{place}` names Python classes shipped in the folder; crossmod loads models with "
                "trust_remote_code=False and never runs a folder's code: use a checkpoint of a model type Transformers "
                "supports (delete the auto_map if the folder's own classes are not needed)"
            )

"""The base models an exported culture folder names: made portable on export, resolved inside the folder on load.

A run names its bases (text encoder, tokenizer, CLIP, VisualBERT, VLM …) as its config gave them: hub ids,
or folders of the machine that trained it. An export must load elsewhere, so its `model_config.json`
never holds an absolute path. A hub id stays as it is. A local folder up to `ship_mb` MiB (the tiny test
models) is copied into the export as `base/<name>` and named `./base/<name>`, relative to the export. A
larger one is never copied silently: a Hugging Face cache snapshot (`models--owner--name/snapshots/<revision>`) is
named by its hub id, any other folder by what it calls itself (its model card's title, else its folder name) and
`@sha256:` a prefix of its content's hash (`all-MiniLM-L6-v2@sha256:…`), which `local_bases` lists so that loading asks
for this machine's copy (`model.<key>=<path>`, e.g. `model.name_or_path` for a VLM, `model.text.name_or_path` for a text
encoder). A folder's `config.json` `_name_or_path` is not taken for a hub id: it names the model the folder was made
from (all-MiniLM-L6-v2 records `nreimers/MiniLM-L6-H384-uncased`), not the folder. The card's `base_provenance`
says what each base was: hub id and revision, or for a local folder its name, its card's title, what its config
declares and a SHA-256 of its files, so a copy can be checked against the one that trained the export.

On load the folder is data: a shipped base must resolve inside it (no `..`, no symlink out), and a base
key may hold only a hub id or such a `./` path, never an absolute path. Overrides come from the user.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from crossmod.artifacts.model_cards import card_title
from crossmod.runtime.user_errors import UserError

log = logging.getLogger(__name__)

BASE_DIR = "base"
LOCAL_BASES = "local_bases"  # model_config.json: the keys naming a training machine's folder that was not shipped
# Keys whose values are loaded as models, tokenizers or processors (`image.model_name`: timm's name).
HF_KEYS = (
    "name_or_path",
    "text.name_or_path",
    "fusion.name_or_path",
    "preprocessor.tokenizer",
    "preprocessor.image_processor",
    "preprocessor.processor",
)
BASE_KEYS = (*HF_KEYS, "image.model_name", "preprocessor.image_model")
PREFERRED_KEYS = HF_KEYS[:3]  # the keys a user overrides: the others were interpolated from them in training
# A Hugging Face repo id (`name` or `owner/name`), optionally timm's `hf-hub:` prefix: never a path.
HUB_ID = re.compile(r"^(hf-hub:)?[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
CACHE_DIR = re.compile(r"^models--([\w.-]+?)--([\w.-]+)$")  # a hub model in the Hugging Face cache
NOT_SHIPPED = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt", "*.lock", ".git", ".cache")


class BaseModelError(UserError, FileNotFoundError):
    """A base model (of an exported folder or a run) cannot be found here: names the key and how to give it."""


def _strings(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, value) of every string in nested mappings."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(value, str):
                yield path, value
            else:
                yield from _strings(value, path)


def _set(config: dict[str, Any], key: str, value: str) -> None:
    *parents, last = key.split(".")
    for part in parents:
        config = config[part]
    config[last] = value


def _local_path(value: str) -> Path | None:
    """The path a config value names on this machine, if it names one (absolute counts, found or not)."""
    if not value or "\n" in value or HUB_ID.match(value) and not os.path.isdir(value):
        return None
    path = Path(value).expanduser()
    try:
        return path.absolute() if path.is_absolute() or path.exists() else None
    except (OSError, ValueError):  # not a file name at all (too long, NUL …)
        return None


def _size_within(folder: Path, limit: int) -> bool:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_size
            if total > limit:
                return False
    return True


def _cached_hub_id(source: Path) -> tuple[str, str | None] | None:
    """(hub id, revision) of a Hugging Face cache snapshot folder (`models--owner--name/snapshots/<revision>`)."""
    parts = source.parts
    for index in range(len(parts) - 1, -1, -1):
        if cached := CACHE_DIR.match(parts[index]):
            revision = parts[index + 2] if len(parts) > index + 2 and parts[index + 1] == "snapshots" else None
            return f"{cached[1]}/{cached[2]}", revision
    return None


def _declared_name(source: Path) -> str | None:
    """What a model folder's config.json says it was made from (`_name_or_path`): recorded, never loaded."""
    try:
        named = json.loads((source / "config.json").read_text()).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return named if isinstance(named, str) and HUB_ID.match(named) else None


def folder_sha256(folder: Path) -> str:
    """SHA-256 over a folder's files (sorted relative paths and each file's SHA-256), the files a shipped copy would
    hold (NOT_SHIPPED left out): equal for two copies of one model folder wherever they live."""
    from crossmod.data.shards import sha256_file

    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if any(relative.match(pattern) or pattern in relative.parts for pattern in NOT_SHIPPED):
            continue
        lines.append(f"{relative.as_posix()}\t{sha256_file(path)}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _recorded_name(source: Path, provenance: Mapping[str, Any]) -> tuple[str, bool]:
    """What a local base is named by without shipping it: (its hub id, True) for a Hugging Face cache snapshot; else
    (what the folder calls itself, its card's title or its folder name, `@sha256:` the first 12 hex digits of its
    content, False): a name that says which model it is and which copy."""
    cached = _cached_hub_id(source)
    if cached:
        return cached[0], True
    name = provenance.get("title") or source.name
    digest = provenance.get("sha256")
    return (f"{name}@sha256:{digest[:12]}" if digest else name), False


def provenance(source: Path, keys: list[str], named: str) -> dict[str, Any]:
    """What the card records of one local base: the hub id and revision of a cache snapshot, else the folder's name,
    its card's title, what its config declares, and the SHA-256 of its files."""
    cached = _cached_hub_id(source)
    if cached:
        return {"keys": keys, "named": named, "hub_id": cached[0], "revision": cached[1]}
    if not source.is_dir():
        return {"keys": keys, "named": named, "file": source.name}
    return {
        "keys": keys,
        "named": named,
        "folder": source.name,
        "title": card_title(source),
        "declares": _declared_name(source),
        "sha256": folder_sha256(source),
    }


def portable_bases(model_cfg: dict[str, Any], out: Path, ship_mb: float) -> tuple[list[str], list[dict[str, Any]]]:
    """Rewrite (in place) every local path `model_cfg` names to a portable name, shipping small folders into
    `out/base/`; returns one line per base for the export's log, and each local base's provenance for the card."""
    shutil.rmtree(out / BASE_DIR, ignore_errors=True)  # a re-export ships afresh
    recorded = dict(_strings(model_cfg))
    sources: dict[Path, list[str]] = {}
    for key, value in recorded.items():
        if (source := _local_path(value)) is not None:
            sources.setdefault(source, []).append(key)
    local: list[str] = []
    notes: list[str] = []
    provenances: list[dict[str, Any]] = []
    for source, keys in sources.items():
        shippable = source.is_dir() and not out.absolute().is_relative_to(source) and _size_within(source, int(ship_mb * 2**20))
        if shippable:
            name, count = source.name, 1
            while (out / BASE_DIR / name).exists():  # two bases of one name (from different folders)
                count += 1
                name = f"{source.name}-{count}"
            shutil.copytree(source, out / BASE_DIR / name, ignore=shutil.ignore_patterns(*NOT_SHIPPED))
            name, hub = f"./{BASE_DIR}/{name}", True
            described = provenance(source, keys, name)
            notes.append(f"shipped the base {source} as {name} ({', '.join(keys)})")
        else:
            described = provenance(source, keys, "")
            name, hub = _recorded_name(source, described)
            given = f"model.{_override_key(keys[0], recorded)}=<local copy>"
            notes.append(
                f"not shipped: the base {source} (over ship_base_mb={ship_mb} MiB, or not a folder) at {', '.join(keys)}, recorded as "
                + (f"the hub id {name!r}" if hub else f"{name!r}: loading it elsewhere needs {given}")
            )
        for key in keys:
            _set(model_cfg, key, name)
        local += [] if hub else keys
        provenances.append({**described, "named": name})
    if local:
        model_cfg[LOCAL_BASES] = local
    return notes, provenances


def _inside(folder: Path, value: str, key: str) -> str:
    """A shipped base's path: inside the folder, every file in it too (symlinks resolved)."""
    root = folder.resolve()
    path = (root / value).resolve()
    escapes = not path.is_relative_to(root) or any(not p.resolve().is_relative_to(root) for p in path.rglob("*"))
    if escapes:
        raise BaseModelError(f"{folder / 'model_config.json'}: {key}={value!r} leads out of the exported folder; refused")
    if not path.is_dir():
        raise BaseModelError(
            f"{folder / 'model_config.json'}: {key}={value!r} is not in the exported folder (copy the whole folder, "
            f"or give the base: model.{key}=<local copy>)"
        )
    return str(path)


def _override_key(key: str, recorded: Mapping[str, str]) -> str:
    """The key a user sets for the base at `key`: the family's own (`name_or_path` …) when it holds the same value."""
    return next((k for k in PREFERRED_KEYS if recorded.get(k) == recorded[key]), key)


def override_keys(model_cfg: Mapping[str, Any]) -> list[str]:
    """The keys a user overrides to give this folder's bases (`name_or_path` for a VLM, `text.name_or_path` …)."""
    recorded = dict(_strings(model_cfg))
    return list(dict.fromkeys(_override_key(k, recorded) for k in HF_KEYS if k in recorded))


def base_overrides(model: Mapping[str, Any] | None, where: str = "") -> dict[str, str]:
    """predict.yaml's `model:` overrides as {dotted model_config key: value}, the null ones left out."""
    found: dict[str, str] = {}
    for key, value in (model or {}).items():
        path = f"{where}.{key}" if where else str(key)
        if isinstance(value, Mapping):
            found.update(base_overrides(value, path))
        elif value is not None:
            found[path] = str(value)
    return found


def with_bases(model_cfg: dict[str, Any], overrides: Mapping[str, str | None] | None, source: Path | str) -> set[str]:
    """Apply the user's base overrides (`{"text.name_or_path": <local copy>}`) to a model config in place: each
    replaces every base key that recorded the same value (a tokenizer interpolated from its encoder follows it).
    Returns the keys given; a key naming no base is refused, listing the config's base keys."""
    recorded = dict(_strings(model_cfg))
    given: set[str] = set()
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in recorded:
            bases = ", ".join(f"model.{k}" for k in override_keys(model_cfg))
            raise BaseModelError(f"model.{key}: {source} names no base there (its base keys: {bases})")
        for other, old in recorded.items():
            if old == recorded[key] and other not in given:
                _set(model_cfg, other, str(value))
                given.add(other)
    return given


def resolve_bases(
    model_cfg: dict[str, Any], folder: Path, overrides: Mapping[str, str | None] | None = None, command: str | None = None
) -> dict[str, Any]:
    """`model_cfg` (a folder's checked model_config.json) with its bases resolved: the user's overrides first (each
    replaces every base key that recorded the same value), then shipped `./` paths inside the folder.
    Raises BaseModelError naming the key and the override when a base cannot be found or is refused; `command`: the
    job's own command line up to the override, for the message (default: predict.py's)."""
    source = folder / "model_config.json"
    local = model_cfg.pop(LOCAL_BASES, None) or []
    if not isinstance(local, list) or not all(isinstance(k, str) for k in local):
        raise BaseModelError(f"{source}: {LOCAL_BASES} must list keys, not {local!r}")
    recorded = dict(_strings(model_cfg))
    given = with_bases(model_cfg, overrides, source)
    _check_copies(recorded, model_cfg, given, local, source)
    command = command or f"crossmod predict adapters={folder}"
    shipped = [k for k, v in recorded.items() if v.startswith(f"./{BASE_DIR}/")]
    for key in dict.fromkeys([*BASE_KEYS, *local, *shipped]):
        value = recorded.get(key)
        if value is None or key in given:
            continue
        fix = f"model.{_override_key(key, recorded)}=<local copy>"
        if key in local:
            raise BaseModelError(
                f"{source}: {key} names {value!r}, a folder of the machine that trained this export, which was not shipped "
                f"in it. Give this machine's copy: {fix} ({command} {fix} …)"
            )
        if value.startswith("./"):
            _set(model_cfg, key, _inside(folder, value, key))
        elif not HUB_ID.match(value) or ".." in value:
            raise BaseModelError(
                f"{source}: {key}={value!r} is neither a hub id nor a path inside the exported folder (an absolute path "
                f"of another machine is never followed): re-export the run, or give the base: {fix}"
            )
    return model_cfg


RECORDED_DIGEST = re.compile(r"@sha256:([0-9a-f]{12})$")


def _check_copies(recorded: Mapping[str, str], model_cfg: dict[str, Any], given: set[str], local: list[str], source: Path) -> None:
    """A copy the user gives for a base recorded with its content hash is hashed too: a different model (or another
    version of it) is said once per base, before any scoring, since its scores are not the export's."""
    checked: set[str] = set()
    for key in local:
        match = RECORDED_DIGEST.search(recorded.get(key, ""))
        value = dict(_strings(model_cfg)).get(key)
        if key not in given or match is None or value is None or value in checked or not Path(value).is_dir():
            continue
        checked.add(value)
        digest = folder_sha256(Path(value))
        if not digest.startswith(match[1]):
            log.warning(
                "%s: model.%s=%s is not the base this export was trained on (%s): its files' SHA-256 begins %s; "
                "the scores will not be the export's",
                source, key, value, recorded[key], digest[:12],
            )  # fmt: skip


def card_base(model_cfg: Mapping[str, Any]) -> Any:
    """The base a card names (`base_model`): the VLM's, else the fusion's, else the text encoder's, as the model config
    records it (a hub id, `./base/<name>`, or a recorded name): the same rule on export and on load."""
    return (
        model_cfg.get("name_or_path")
        or (model_cfg.get("fusion") or {}).get("name_or_path")
        or (model_cfg.get("text") or {}).get("name_or_path")
    )


def check_card_bases(card: Mapping[str, Any], model_cfg: Mapping[str, Any], folder: Path, fix: str, given: Iterable[str] = ()) -> None:
    """An exported folder's claims about its base hold for its files, before anything is built: the card's
    `base_model` is the base model_config.json builds, a PEFT adapter names that base too, and each shipped base
    (`./base/<name>`) holds the files whose SHA-256 the card's `base_provenance` recorded. A folder whose base was
    swapped after export (or whose card was edited) would otherwise be scored, under the card's name and numbers,
    as a model it is not. `model_cfg`: model_config.json as recorded (before its bases are resolved); `given`: the
    base keys the user overrode, whose copy is the user's choice (and hashed by `resolve_bases`), not the folder's."""
    given = {key.removeprefix("model.") for key in given}
    card_path, config_path = folder / "culture_card.json", folder / "model_config.json"
    claimed, built = card.get("base_model"), card_base(model_cfg)
    if "base_model" in card and claimed != built and not given:
        raise BaseModelError(f"{card_path}: base_model is {claimed!r}, but {config_path} builds {built!r}: the card does not describe these weights", fix)
    adapter = folder / "adapter_config.json"
    if card.get("format") == "peft-lora" and adapter.is_file() and not given:
        try:
            named = json.loads(adapter.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            raise BaseModelError(f"{adapter}: not a JSON object", fix) from None
        fusion = (model_cfg.get("fusion") or {}).get("name_or_path")
        if named != fusion:
            raise BaseModelError(f"{adapter}: base_model_name_or_path is {named!r}, but {config_path} builds {fusion!r}: the adapter was not trained on this base", fix)
    recorded = card.get("base_provenance") or []
    if not isinstance(recorded, list) or not all(isinstance(entry, Mapping) for entry in recorded):
        raise BaseModelError(f"{card_path}: base_provenance is not a list of objects", fix)
    for entry in recorded:
        named, digest = entry.get("named"), entry.get("sha256")
        if not (isinstance(named, str) and named.startswith(f"./{BASE_DIR}/")) or given & set(entry.get("keys") or []):
            continue
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise BaseModelError(f"{card_path}: base_provenance for {named} has no SHA-256 of its files (sha256 is {digest!r})", fix)
        found = folder_sha256(Path(_inside(folder, named, "base_provenance")))
        if found != digest:
            raise BaseModelError(
                f"{folder / named.removeprefix('./')}: its files' SHA-256 begins {found[:12]}, not the {digest[:12]} that "
                f"{card_path.name} base_provenance records: the shipped base is not the one these weights were trained on",
                fix,
            )


def missing_local_bases(model_cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(override key, path) of each base a run's model config names as a folder of this machine that is not there."""
    recorded = dict(_strings(model_cfg))
    missing = []
    for key in override_keys(model_cfg):
        value = recorded[key]
        if (os.path.isabs(value) or value.startswith(("./", "../", "~"))) and not Path(value).expanduser().exists():
            missing.append((key, value))
    return missing


def parse_base_overrides(arguments: list[str]) -> dict[str, str]:
    """`model.<key>=<path>` arguments (the spelling every job takes) as {key: path}; anything else is refused."""
    overrides = {}
    for argument in arguments:
        key, sep, value = argument.partition("=")
        if not (sep and key.startswith("model.") and value):
            raise ValueError(f"{argument!r}: a base is given as model.<key>=<local copy>, e.g. model.text.name_or_path=/models/my-bert")
        overrides[key.removeprefix("model.")] = value
    return overrides


def absolute_paths(config: Any, where: str = "") -> list[str]:
    """Keys of every string in `config` that is an absolute path (what an exported folder must not hold)."""
    found = []
    if isinstance(config, Mapping):
        for key, value in config.items():
            found += absolute_paths(value, f"{where}.{key}" if where else str(key))
    elif isinstance(config, list):
        for index, value in enumerate(config):
            found += absolute_paths(value, f"{where}[{index}]")
    elif isinstance(config, str) and (os.path.isabs(config) or config.startswith("~")):
        found.append(where)
    return found


MACHINE_PATH = "<training machine>"


def without_machine_paths(config: Any) -> Any:
    """A copy of `config` whose absolute paths are `<training machine>/<last part>`: an exported card says which folder a
    run read (its name) without naming the training machine's layout (home folders, user names, mount points)."""
    if isinstance(config, Mapping):
        return {key: without_machine_paths(value) for key, value in config.items()}
    if isinstance(config, list):
        return [without_machine_paths(value) for value in config]
    if isinstance(config, str) and (os.path.isabs(config) or config.startswith("~")):
        return f"{MACHINE_PATH}/{os.path.basename(config.rstrip('/'))}"
    return config

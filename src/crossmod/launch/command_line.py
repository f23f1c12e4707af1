"""A job's command line, read before the job is imported: its help, and the override mistakes caught in one line.

`crossmod <job> --help` answers from the job's config file alone (no torch, no composition): its own keys with their
comments first, then its config groups and their defaults. Hydra's own help (`--hydra-help`) and every composed value
(`--cfg job`) stay one flag away.

`check` catches, before torch loads and before any work, the two typos Hydra answers with a 30-line listing or with
advice that would add the typo as a new key: an option a config group does not have (`experiment=qwen_lora_c`) and a
key the composed config does not have (`trainer.max_epoch=1`). Each is one line with a did-you-mean. What it cannot
judge for sure (a Hydra flag it does not know, a composition that fails for another reason) it leaves to Hydra.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from crossmod.runtime.user_errors import UserError

CONFIG_NAME = re.compile(r"""@hydra\.main\(.*config_name=["']([\w/]+)["']""")
KEY_LINE = re.compile(r"^(?P<indent> {0,2})(?P<key>[A-Za-z_][\w-]*):\s*(?P<value>.*?)\s*(?:#\s?(?P<comment>.*))?$")
DEFAULT_LINE = re.compile(r"^\s+-\s+(?:optional\s+)?(?P<group>[\w/]+)(?:@[\w.]+)?:\s*(?P<option>[^#\s]*)\s*(?:#\s?(?P<comment>.*))?$")
# Hydra flags a check understands; with any other (--info, --cfg, --run …) the command is Hydra's to answer
KNOWN_FLAGS = ("-m", "--multirun")
VALUE_FLAGS = ("--config-dir", "-cd")
WIDTH = 118


def config_name(module: str) -> str | None:
    """The config a Hydra job composes (`@hydra.main(config_name=…)`), read from its source without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    found = CONFIG_NAME.search(Path(spec.origin).read_text(encoding="utf-8"))
    return found.group(1) if found else None


@dataclass(frozen=True)
class Entry:
    name: str
    value: str
    comment: str


def _entries(text: str) -> tuple[list[Entry], list[Entry]]:
    """(the file's keys, top-level and one level down, with their comment), (its defaults list's groups)."""
    keys: list[Entry] = []
    groups: list[Entry] = []
    block: list[str] = []
    parent, in_defaults = "", False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            # a comment block at a key's indentation describes the key below it; one indented further (aligned with
            # the comments after values) continues the line above
            if not stripped:
                block = []
            elif len(line) - len(line.lstrip()) <= 2:
                block = [*block, stripped.lstrip("# ")]
            continue
        if in_defaults and (default := DEFAULT_LINE.match(line)):
            if default["group"] not in ("_self_",):
                groups.append(Entry(default["group"], default["option"], default["comment"] or ""))
            continue
        match = KEY_LINE.match(line)
        if match is None:
            block = []
            continue
        top = not match["indent"]
        in_defaults = top and match["key"] == "defaults"
        if in_defaults:
            continue
        name = match["key"] if top else f"{parent}.{match['key']}"
        if top:
            parent = match["key"]
        if top or parent:
            keys.append(Entry(name, match["value"], match["comment"] or (block[0] if block else "")))
        block = []
    return keys, groups


def _row(left: str, comment: str, width: int) -> str:
    text = f"  {left:<{width}}  {comment}".rstrip()
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


def help_text(job: str, summary: str, module: str, configs: Path) -> str | None:
    """`crossmod <job> --help`: the job's keys (from its config file) first, then its groups; None for a non-Hydra job."""
    name = config_name(module)
    if name is None:
        return None
    path = configs / f"{name}.yaml"
    keys, groups = _entries(path.read_text(encoding="utf-8"))
    shown = [e for e in keys if (e.value or "." not in e.name) and e.name.split(".")[0] != "hydra"]  # Hydra's: --hydra-help
    width = min(34, max((len(f"{e.name}={e.value}") for e in shown), default=10))
    lines = [f"crossmod {job}: {summary}", f"usage: crossmod {job} [key=value …] [group=option …]   (config: {path})", ""]
    lines.append("keys (key=value; the job's own, from its config file):")
    for entry in shown:
        lines.append(_row(f"{entry.name}={entry.value}" if entry.value else f"{entry.name}.…", entry.comment, width))
    if groups:
        lines += ["", "config groups (group=option; crossmod ls <group> lists the options):"]
        for entry in groups:
            if entry.name == "hydra":
                continue  # Hydra's own settings: --hydra-help
            options = ", ".join(sorted(_options([configs], entry.name) or ()))
            lines.append(_row(f"{entry.name}={entry.value or 'null'}", entry.comment or f"options: {options}", width))
    lines += [
        "",
        f"every composed value: crossmod {job} [overrides …] --cfg job     Hydra's own help: crossmod {job} --hydra-help",
        f"a folder of one's own configs: crossmod {job} --config-dir <folder> <group>=<name>   (crossmod cp makes one)",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ override checks
def _split(args: list[str]) -> tuple[list[str], list[Path]] | None:
    """(the overrides, the --config-dir folders); None when a flag is one the checks leave to Hydra."""
    overrides, dirs = [], []
    items = iter(args)
    for arg in items:
        if arg in KNOWN_FLAGS:
            continue
        if arg in VALUE_FLAGS:
            dirs.append(Path(next(items, "")))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]))
        elif arg.startswith("-"):
            return None
        else:
            overrides.append(arg)
    return overrides, dirs


def _options(folders: list[Path], group: str) -> set[str] | None:
    """A group's option names across the config folders; None when no folder has that group."""
    found = [folder / group for folder in folders if (folder / group).is_dir()]
    if not found:
        return None
    return {str(p.relative_to(f).with_suffix("")) for f in found for p in f.rglob("*.yaml")}


# groups whose configs compose a Hydra plugin's own config: without the plugin Hydra says "Could not find 'hydra/…'"
PLUGINS = {"hparams_search": "hydra_plugins.hydra_optuna_sweeper", "hydra/launcher": "hydra_plugins.hydra_submitit_launcher"}


def _plugin(group: str, values: list[str]) -> None:
    from crossmod.launch.preflight import needs_package

    if any(v not in ("null", "basic") for v in values):  # Hydra's own basic launcher needs no plugin
        needs_package(PLUGINS[group], group)


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check(job: str, module: str, args: list[str], configs: Path) -> None:
    """Refuse an unknown group option or an unknown key in one line, before the job is imported."""
    name = config_name(module)
    split = _split(args)
    if name is None or split is None:
        return
    overrides, dirs = split
    folders = [*(d.absolute() for d in dirs), configs]
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return  # malformed: Hydra's parser names the spot
    composing, keys, swept_group = [], [], False
    for override in parsed:
        key = override.key_or_group
        if key in PLUGINS and not override.is_delete():
            _plugin(key, list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.get_value_element_as_str()])
        if override.package is not None or key.split(".")[0].split("/")[0] == "hydra":
            continue
        options = _options(folders, key)
        if override.is_delete() or (options is None and (override.is_add() or override.is_force_add())):
            composing.append(override.input_line)  # what it removes or adds is there for the keys after it
            continue
        if options is None:
            keys.append(key)
            continue
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.get_value_element_as_str()]
        for value in values:
            if value not in options and value != "null" and "$" not in value:
                raise UserError(
                    f"{key}={value}: no such {key} config{_suggest(value, sorted(options))}",
                    f"crossmod ls {key} lists them (a config of one's own: --config-dir <folder> with {key}/<name>.yaml)",
                    key,
                )
        swept_group = swept_group or len(values) > 1
        prefix = override.input_line.split(key, 1)[0]
        composing.append(f"{prefix}{key}={values[0]}" if values else override.input_line)
    if keys and not swept_group:  # a swept group (model=text,image) composes differently per job: its keys are Hydra's
        _check_keys(name, folders, composing, keys, job)


def _check_keys(name: str, folders: list[Path], composing: list[str], keys: list[str], job: str) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    search = [f"hydra.searchpath=[{','.join(f'file://{f}' for f in folders[:-1])}]"] if len(folders) > 1 else []
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(folders[-1]), job_name=job):
            cfg = compose(config_name=name, overrides=[*search, *composing])
    except (HydraException, OmegaConfBaseException, ValueError):
        return  # the composition itself fails: Hydra's own run says why
    for key in keys:
        node, path = cfg, key.split(".")
        for depth, part in enumerate(path):
            if not isinstance(node, DictConfig):
                break  # a list or a value: indexing it is Hydra's to judge
            if part not in node.keys():
                where = ".".join(path[:depth])
                close = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=1, cutoff=0.6)
                near = f" (did you mean {'.'.join([*path[:depth], close[0]])}?)" if close else ""
                fix = (
                    f"crossmod {job} --help lists the job's keys, --cfg job every composed one"
                    if close  # never the advice to add the typo as a new key
                    else f"crossmod {job} --cfg job lists every key; +{key}=<value> adds a key the config lacks, if that is meant"
                )
                raise UserError(f"{key}: the composed config has no key {part!r}{' under ' + where if where else ''}{near}", fix, key)
            if OmegaConf.is_interpolation(node, part) or OmegaConf.is_missing(node, part):
                break
            node = node[part]

"""Secrets never reach run files: one rule for secret-looking keys, applied to everything a run writes.

A key is secret when one of its words (split at `_`, `-`, `.` and case changes, so `WANDB_API_KEY`,
`wandbApiKey`, `accessToken`, `auth`, `private_key` alike) names a credential, or is `key` after a word
that makes it one (`api`, `private`, `access` …), or is a last `key` after any word but an ordinary one
(`wandb_key` is secret, `sort_key` is not). Tokenizers and token counts (`tokenizer`, `max_new_tokens`)
are not secrets. Credentials inside URLs (`https://user:secret@host`, `?token=…`) are removed from
every string, and a secret key inside a structured override (`'+creds={api_key: …}'`) is redacted in
the override's text as in the config. Values under such keys become `***` in crossmod's `config.yaml`,
the loggers' hyperparameters (CSV `hparams.yaml`, W&B's config) and exported folders; the Hydra
callback below does the same to Hydra's `.hydra/` files and the sweep's `multirun.yaml` once Hydra
has written them, and to the command line that W&B records. Rewriting after Hydra writes is the seam
Hydra offers: it saves the files in `run_job` just before `on_job_start`, with no hook in between, and
redacting the command line before Hydra parses it would hand the run `***` instead of its values. Secrets belong in the environment
(`WANDB_API_KEY`, `HF_TOKEN`), never in overrides.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from crossmod.data.cache_files import write_file

REDACTED = "***"
# A word is secret when it ends with one of these (so run-together `accesstoken`, `apikey` count too).
CREDENTIAL_ENDINGS = (
    "token",
    "secret",
    "secrets",
    "password",
    "passwd",
    "passphrase",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "cookie",
    "pwd",
)
# ... or is one of these whole words (signed URLs: `?sig=`, `X-Amz-Signature=`, Azure's `sas`)
SECRET_WORDS = frozenset({"sig", "signature", "sas"})
# ... or is `key` right after one of these words (or run together with it: `apikey`, `privatekey`).
KEY_QUALIFIERS = frozenset({"api", "private", "access", "secret", "signing", "ssh", "encryption", "client", "session", "license"})
# A last `key` after one of these words is an ordinary key (`sort_key`, `exclude_keys`), not a credential.
ORDINARY_KEY_QUALIFIERS = frozenset(
    {"sort", "group", "by", "data", "dataset", "state", "stable", "cache", "primary", "foreign", "exclude", "include", "override"}
    | {"metric", "monitor", "image", "text", "label", "head", "id", "join", "lookup", "hash", "dict", "map", "sample", "column"}
    | {"field", "nested", "missing", "stored", "batch", "config", "shard", "split", "rng", "prng", "random", "seed", "dict"}
)
WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
OVERRIDE = re.compile(r"^(?P<key>[+~]{0,2}[\w.@/-]+)=(?P<value>.*)$", re.DOTALL)
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@?#]+@")
QUERY_PARAMETER = re.compile(r"(?P<lead>[?&])(?P<name>[^=&#\s]+)=(?P<value>[^&#\s]*)")
# a value stops at a brace, so the keys of a nested mapping (`{init: {settings: {x-api-key: S}}}`) are each looked at
MAPPING_ENTRY = re.compile(r"""(?P<name>[\w.-]+)(?P<sep>\s*:\s*)(?P<value>'[^']*'|"[^"]*"|[^,\]{}]+)""")
# `KEY=value` inside a string: a list item (`env_vars=["WANDB_API_KEY=S"]`), a shell line (`export WANDB_API_KEY=S`), an
# override a launcher prints for a sweep's job (`#0 : +HF_TOKEN=S`, the value chosen from `choice(…)`)
ASSIGNMENT = re.compile(r"""(?P<lead>^|[\s\["',{;+~])(?P<name>[A-Za-z_][\w.-]*)=(?P<value>[^\s,;&'"\]}]+)""")
# `user:secret@host` without a scheme (scp, rsync, git remotes)
BARE_CREDENTIALS = re.compile(
    r"(?<![\w/:@.-])(?P<user>[A-Za-z0-9._-]+):(?P<secret>[^\s@/:'\"]+)@(?P<host>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
)
MIN_ENV_SECRET = 8  # shorter environment values (`1`, `true`, `offline`) would blank ordinary words


def key_words(name: str) -> list[str]:
    """`wandbApiKey` → [wandb, api, key]; `WANDB_API_KEY` → the same."""
    return [word.lower() for word in WORD.findall(name)]


def is_secret_key(name: Any) -> bool:
    words = key_words(str(name))
    if any(word.endswith(CREDENTIAL_ENDINGS) or word in SECRET_WORDS for word in words):
        return True
    if any(word in {f"{q}key" for q in KEY_QUALIFIERS} | {f"{q}keys" for q in KEY_QUALIFIERS} for word in words):
        return True
    if any(first in KEY_QUALIFIERS and second in ("key", "keys") for first, second in zip(words, words[1:])):
        return True
    return bool(words) and words[-1] in ("key", "keys") and (len(words) == 1 or words[-2] not in ORDINARY_KEY_QUALIFIERS)


# The shell's working directories: `pwd` is a password word in a config key, not in these two names.
NOT_SECRET_ENVIRONMENT = frozenset({"PWD", "OLDPWD"})


def secret_environment_values() -> list[str]:
    """Values of this process's secret-named environment variables (`HF_TOKEN`, `WANDB_API_KEY` …), longest first:
    a config that read one (`${oc.env:TOKEN}`) holds it resolved under an ordinary key. Paths are no secrets
    (`SSH_AUTH_SOCK` names a socket): blanking one would break every path below it in the run's files."""
    values = {
        value
        for name, value in os.environ.items()
        if name not in NOT_SECRET_ENVIRONMENT
        and is_secret_key(name)
        and len(value) >= MIN_ENV_SECRET
        and value != REDACTED
        and not value.startswith(("/", "~", "."))
        and not os.path.exists(value)
    }
    return sorted(values, key=len, reverse=True)


def redact_text(text: str) -> str:
    """A string without the credentials it can carry: `https://user:pw@host` → `https://***@host`, `user:pw@host` →
    `user:***@host`, `?token=abc` or `?sig=abc` → `?token=***`, `export API_KEY=abc` → `export API_KEY=***`, and
    the value of any secret-named environment variable → `***`."""
    for value in secret_environment_values():
        text = text.replace(value, REDACTED)
    text = URL_CREDENTIALS.sub(rf"\g<scheme>{REDACTED}@", text)
    text = BARE_CREDENTIALS.sub(rf"\g<user>:{REDACTED}@\g<host>", text)
    text = ASSIGNMENT.sub(lambda m: f"{m['lead']}{m['name']}={REDACTED}" if is_secret_key(m["name"]) else m[0], text)
    return QUERY_PARAMETER.sub(lambda m: f"{m['lead']}{m['name']}={REDACTED}" if is_secret_key(m["name"]) else m[0], text)


def redact_override(line: str) -> str:
    """`+WANDB_API_KEY=abc` → `+WANDB_API_KEY=***` (a key path is secret when any part of it is);
    `+creds={api_key: abc}` → `+creds={api_key: ***}`; URL credentials in any value removed."""
    match = OVERRIDE.match(line)
    if match is None:
        return redact_text(line)
    if any(is_secret_key(part) for part in re.split(r"[./@]", match["key"].lstrip("+~"))):
        return f"{match['key']}={REDACTED}"
    value = MAPPING_ENTRY.sub(lambda m: f"{m['name']}{m['sep']}{REDACTED}" if is_secret_key(m["name"]) else m[0], match["value"])
    return f"{match['key']}={redact_text(value)}"


def redact(container: Any) -> Any:
    """Copy of a plain config with values under secret keys replaced, and secret `key=value` entries of
    lists (overrides, as in `overrides.yaml` and `hydra.overrides.task`)."""
    if isinstance(container, dict):
        return {k: REDACTED if is_secret_key(k) and v is not None else redact(v) for k, v in container.items()}
    if isinstance(container, list):
        return [redact_override(v) if isinstance(v, str) else redact(v) for v in container]
    if isinstance(container, str):
        return redact_text(container)
    return container


def _replace(container: Any, replacements: dict[str, str]) -> Any:
    """Every string with each secret override replaced wherever it appears whole (Hydra's override_dirname)."""
    if isinstance(container, dict):
        return {k: _replace(v, replacements) for k, v in container.items()}
    if isinstance(container, list):
        return [_replace(v, replacements) for v in container]
    if isinstance(container, str):
        for original in sorted(replacements, key=len, reverse=True):
            container = container.replace(original, replacements[original])
    return container


def redact_yaml(path: Path, replacements: dict[str, str] | None = None) -> bool:
    """Redact a YAML file Hydra wrote, in place (atomically); False when it held no secret."""
    plain = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    redacted = redact(_replace(plain, replacements or {}))  # whole overrides first: the generic rules cut them up
    if redacted == plain:
        return False
    write_file(path, OmegaConf.to_yaml(OmegaConf.create(redacted)).encode(), "run file", user_folder=True)
    return True


def _as_hydra_writes(line: str, kv_sep: str) -> str | None:
    """An override as Hydra spells it in `override_dirname` (`{a: 1}` → `{a:1}`, `:` escaped); None for sweeps."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        override = OverridesParser.create().parse_override(line)
        return None if override.is_sweep_override() else f"{override.get_key_element()}{kv_sep}{override.get_value_element_as_str()}"
    except Exception:  # noqa: BLE001 - a line Hydra does not parse is not in override_dirname either
        return None


def secret_overrides(lines: Iterable[str], kv_sep: str = "=") -> dict[str, str]:
    """{override as written: redacted}, also as Hydra joins them into `hydra.job.override_dirname`."""
    found = {line: redact_override(line) for line in lines if redact_override(line) != line}
    for line, redacted in list(found.items()):
        found[line.replace("=", kv_sep)] = redacted.replace("=", kv_sep)
        original, replacement = _as_hydra_writes(line, kv_sep), _as_hydra_writes(redacted, kv_sep)
        if original and replacement and original != replacement:
            found[original] = replacement
    return found


# Where Hydra's launchers print each job's overrides (`#0 : model=text +wandb_key=…`), under SLURM into slurm-*.out
LAUNCHER_LOGGERS = ("hydra._internal.core_plugins.basic_launcher", "hydra_plugins.hydra_submitit_launcher.submitit_launcher")


class RedactedRecords(logging.Filter):
    """Rewrites a log record's text with the secret overrides replaced and `redact_text` applied."""

    def __init__(self, replacements: dict[str, str]) -> None:
        super().__init__()
        self.replacements = replacements

    def filter(self, record: logging.LogRecord) -> bool:
        text = _replace(record.getMessage(), self.replacements)
        record.msg, record.args = redact_text(text), ()
        return True


class RedactSecrets(Callback):
    """Hydra callback (configs/hydra/default.yaml): Hydra saves `.hydra/{config,hydra,overrides}.yaml`
    just before `on_job_start`, and a sweep's `multirun.yaml` after `on_multirun_start`; they are
    redacted in `on_job_start` (and `on_multirun_end`). So is `sys.argv`, which W&B records as the run's
    arguments: Hydra has parsed it, and DDP workers started from it get the redacted values."""

    def __init__(self) -> None:
        self.replacements: dict[str, str] = {}

    def _remember(self, config: DictConfig) -> None:
        hydra = config.hydra
        lines = [*sys.argv[1:], *hydra.overrides.task, *hydra.overrides.hydra]
        self.replacements.update(secret_overrides(lines, hydra.job.config.override_dirname.kv_sep))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._remember(config)
        for name in LAUNCHER_LOGGERS:  # the launcher prints each job's overrides before the job starts
            logger = logging.getLogger(name)
            if not any(isinstance(f, RedactedRecords) for f in logger.filters):
                logger.addFilter(RedactedRecords(self.replacements))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._remember(config)
        hydra = config.hydra
        files = [Path(hydra.sweep.dir) / "multirun.yaml"] if hydra.mode == RunMode.MULTIRUN else []
        if hydra.output_subdir is not None:
            files += [Path(hydra.runtime.output_dir) / hydra.output_subdir / f"{name}.yaml" for name in ("config", "hydra", "overrides")]
        for path in files:
            if path.is_file():
                redact_yaml(path, self.replacements)
        sys.argv[1:] = [redact_override(arg) for arg in sys.argv[1:]]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = Path(config.hydra.sweep.dir) / "multirun.yaml"
        if path.is_file():
            redact_yaml(path, self.replacements)

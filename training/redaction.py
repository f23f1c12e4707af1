"""Secrets never reach run files: one rule for secret-looking keys, applied to everything a run writes.

A key is secret when one of its words (split at `_`, `-`, `.` and case changes, so `WANDB_API_KEY`,
`wandbApiKey`, `accessToken`, `auth`, `private_key` alike) names a credential, or is `key` after a word
that makes it one (`api`, `private`, `access` …). Tokenizers and token counts (`tokenizer`,
`max_new_tokens`) are not secrets. Values under such keys become `***` in crossmod's `config.yaml`,
the loggers' hyperparameters (CSV `hparams.yaml`, W&B's config) and exported folders; the Hydra
callback below does the same to Hydra's `.hydra/` files and the sweep's `multirun.yaml` once Hydra
has written them, and to the command line that W&B records. Secrets belong in the environment
(`WANDB_API_KEY`, `HF_TOKEN`), never in overrides.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

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
)
# ... or is `key` right after one of these words (or run together with it: `apikey`, `privatekey`).
KEY_QUALIFIERS = frozenset({"api", "private", "access", "secret", "signing", "ssh", "encryption", "client", "session", "license"})
WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
OVERRIDE = re.compile(r"^(?P<key>[+~]{0,2}[\w.@/-]+)=(?P<value>.*)$", re.DOTALL)


def key_words(name: str) -> list[str]:
    """`wandbApiKey` → [wandb, api, key]; `WANDB_API_KEY` → the same."""
    return [word.lower() for word in WORD.findall(name)]


def is_secret_key(name: Any) -> bool:
    words = key_words(str(name))
    if any(word.endswith(CREDENTIAL_ENDINGS) for word in words):
        return True
    if any(word in {f"{q}key" for q in KEY_QUALIFIERS} | {f"{q}keys" for q in KEY_QUALIFIERS} for word in words):
        return True
    return any(first in KEY_QUALIFIERS and second in ("key", "keys") for first, second in zip(words, words[1:]))


def redact_override(line: str) -> str:
    """`+WANDB_API_KEY=abc` → `+WANDB_API_KEY=***`; a key path is secret when any part of it is."""
    match = OVERRIDE.match(line)
    if match and any(is_secret_key(part) for part in re.split(r"[./@]", match["key"].lstrip("+~"))):
        return f"{match['key']}={REDACTED}"
    return line


def redact(container: Any) -> Any:
    """Copy of a plain config with values under secret keys replaced, and secret `key=value` entries of
    lists (overrides, as in `overrides.yaml` and `hydra.overrides.task`)."""
    if isinstance(container, dict):
        return {k: REDACTED if is_secret_key(k) and v is not None else redact(v) for k, v in container.items()}
    if isinstance(container, list):
        return [redact_override(v) if isinstance(v, str) else redact(v) for v in container]
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
    redacted = _replace(redact(plain), replacements or {})
    if redacted == plain:
        return False
    tmp = path.with_name(f".{path.name}.redacting")
    tmp.write_text(OmegaConf.to_yaml(OmegaConf.create(redacted)))
    os.replace(tmp, path)
    return True


def secret_overrides(lines: Iterable[str], kv_sep: str = "=") -> dict[str, str]:
    """{override as written: redacted}, also as Hydra joins them into `hydra.job.override_dirname`."""
    found = {line: redact_override(line) for line in lines if redact_override(line) != line}
    found.update({k.replace("=", kv_sep): v.replace("=", kv_sep) for k, v in list(found.items())})
    return found


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

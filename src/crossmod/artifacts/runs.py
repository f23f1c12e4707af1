"""What every run leaves in its directory: resolved config (secrets redacted), manifest, metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from crossmod.data.cache_files import write_file
from crossmod.data.remote import is_remote
from crossmod.data.shards import read_manifest, write_json_atomic
from crossmod.evaluation.summary import json_safe
from crossmod.runtime.redaction import redact  # the one rule for secret-looking keys (also for loggers and exports)
from crossmod.runtime.user_errors import UserError

MAX_CONFIG_BYTES = 8 << 20  # a run's config.yaml is a few kB; a larger one is not one crossmod wrote


class RunConfigError(UserError, ValueError):
    """A run folder's config.yaml that crossmod did not write: named, never half-read."""


def read_config(path: Path) -> DictConfig:
    """A run's config.yaml (a run folder may come from someone else), read as data: at most MAX_CONFIG_BYTES and
    without YAML anchors or aliases, which crossmod never writes and which let a few lines expand without bound (a
    "YAML bomb" that ran until killed)."""
    import yaml

    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise RunConfigError(f"{path}: {size} bytes, more than a run's config ({MAX_CONFIG_BYTES} at most)", REFIX)
    text = path.read_text(encoding="utf-8")
    try:
        aliased = any(isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) for event in yaml.parse(text))
    except yaml.YAMLError as error:
        raise RunConfigError(f"{path}: not YAML ({type(error).__name__})", REFIX) from None
    if aliased:
        raise RunConfigError(f"{path}: holds YAML anchors or aliases, which no crossmod run writes", REFIX)
    return OmegaConf.create(text)


REFIX = "use the run folder as crossmod train wrote it"


def save_config(cfg: DictConfig, run_dir: Path) -> None:
    plain = redact(OmegaConf.to_container(cfg, resolve=True))
    write_file(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(plain)).encode(), "run config", user_folder=True)


def copy_manifest(dataset_dir: Path | str, run_dir: Path) -> None:
    """The dataset's manifest beside the run (fetched once more when the dataset is remote)."""
    if is_remote(dataset_dir):
        write_json_atomic(run_dir / "manifest.json", read_manifest(dataset_dir))
    else:
        write_file(run_dir / "manifest.json", (Path(dataset_dir) / "manifest.json").read_bytes(), "manifest copy", user_folder=True)


def nest(flat: dict[str, Any], stage: str) -> dict[str, dict[str, float]]:
    """`{"val/US/auroc": x}` → `{"US": {"auroc": x}}` for one stage (losses kept under `loss`)."""
    nested: dict[str, dict[str, float]] = {}
    for key, value in flat.items():
        parts = key.split("/")
        if parts[0] != stage:
            continue
        value = float(value)
        if len(parts) == 2:
            nested.setdefault("all", {})[parts[1]] = value
        elif len(parts) == 3:
            nested.setdefault(parts[1], {})[parts[2]] = value
    return nested


def write_metrics(run_dir: Path, payload: dict[str, Any]) -> Path:
    path = run_dir / "metrics.json"
    path.write_text(json.dumps(json_safe(payload), indent=1, allow_nan=False))
    return path

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
from crossmod.lib.redaction import redact  # the one rule for secret-looking keys (also for loggers and exports)


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

"""What every run leaves in its directory: resolved config (secrets redacted), manifest, metrics."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Whole words of a key name: hub_token, api_key, WANDB_API_KEY, password; not tokenizer or max_new_tokens.
SECRET_KEY = re.compile(r"(^|[_-])(api[_-]?key|apikey|token|secret|password|passwd)($|[_-])", re.IGNORECASE)


def redact(container: Any) -> Any:
    """Copy of a plain config with values under secret-looking keys replaced."""
    if isinstance(container, dict):
        return {k: "***" if SECRET_KEY.search(str(k)) and v is not None else redact(v) for k, v in container.items()}
    if isinstance(container, list):
        return [redact(v) for v in container]
    return container


def save_config(cfg: DictConfig, run_dir: Path) -> None:
    plain = redact(OmegaConf.to_container(cfg, resolve=True))
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(plain)))


def copy_manifest(dataset_dir: Path, run_dir: Path) -> None:
    shutil.copyfile(dataset_dir / "manifest.json", run_dir / "manifest.json")


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
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return None if isinstance(value, float) and math.isnan(value) else value

    path = run_dir / "metrics.json"
    path.write_text(json.dumps(clean(payload), indent=1))
    return path

"""What `crossmod serve` checks before it binds a port or loads a model: LitServe installed, the adapters exported culture
folders (each culture once), its numbers in range, an address LitServe binds, and a token file holding a usable token
(never printed). The checks every job shares are `crossmod.launch.preflight`'s."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from crossmod.launch.preflight import culture_adapters, existing, needs_package
from crossmod.runtime.user_errors import UserError, require
from crossmod.runtime.value_ranges import Range, check_ranges

SERVE_RANGES = {
    "port": Range(whole=True, low=1024, high=65535, example="8000"),
    "threshold": Range(whole=False, low=0, high=1, example="0.5"),
    "threads": Range(whole=True, low=1, nullable=True, example="2"),
    "batching.max_batch_size": Range(whole=True, low=1, example="8"),
    "batching.batch_timeout_s": Range(whole=False, low=0, example="0.01"),
    "limits.max_queue": Range(whole=True, low=1, example="64"),
    "limits.max_body_bytes": Range(whole=True, low=1, example="16777216"),
    "limits.max_memes": Range(whole=True, low=1, example="64"),
    "limits.max_image_bytes": Range(whole=True, low=1, example="10485760"),
    "limits.max_text_chars": Range(whole=True, low=1, example="10000"),
    "limits.request_timeout_s": Range(whole=False, low=0, above=True, example="30"),
    "limits.drain_s": Range(whole=False, low=0, example="30"),
}
SERVE_HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # the addresses LitServe binds


def serve(cfg: DictConfig) -> None:
    """crossmod serve: LitServe installed, the adapters exported culture folders, numbers in range, a usable token."""
    needs_package("litserve", "adapters")
    require(cfg, ["adapters"])
    check_ranges(cfg, SERVE_RANGES)
    culture_adapters(cfg)
    if str(cfg.host) not in SERVE_HOSTS:
        raise UserError(f"host={cfg.host} is not an address the server binds", f"pass host={' | '.join(SERVE_HOSTS)} (127.0.0.1: this machine only)", "host")
    from crossmod.evaluation.abstention import SCORES

    if cfg.disagreement not in SCORES:
        raise UserError(f"disagreement={cfg.disagreement} is not a disagreement score crossmod computes", f"use disagreement={' | '.join(SCORES)}", "disagreement")
    unknown = sorted(set(cfg.allow_missing) - {"text", "image"})
    if unknown:
        raise UserError(f"allow_missing={list(cfg.allow_missing)} names {unknown}, not inputs", "pass allow_missing=[text] and/or [image]", "allow_missing")
    if cfg.auth.token_file:
        existing({"auth.token_file": cfg.auth.token_file}, "auth.token_file", "a file holding the bearer token")  # type: ignore[arg-type]
        token = Path(str(cfg.auth.token_file)).read_text(encoding="utf-8").strip()
        if len(token) < 16 or not token.isprintable():
            raise UserError(
                f"auth.token_file={cfg.auth.token_file} holds no usable token (16 printable characters or more)",
                "write a long random one there: python -c 'import secrets; print(secrets.token_urlsafe(32))' > <file>",
                "auth.token_file",
            )

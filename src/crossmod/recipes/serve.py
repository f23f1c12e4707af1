"""Serve exported cultures over HTTP: `crossmod serve adapters=[<export>/US,<export>/DE,…] [host=127.0.0.1] [port=8000]`.

`POST /v1/classify` takes `{"memes": [{"id", "text", "image": <base64>, "lang"}, …]}` and answers per meme and culture
`p`, `p_calibrated`, `decision`, the policy's `action` and name, a retrieval culture's `neighbours`, and the cultures'
`disagreement`: the rows `crossmod predict` writes for the same memes. `GET /v1/models` lists the cultures and their
cards, `/healthz` and `/readyz` are the probes, `/openapi.json` the schema (src/crossmod/serving/, docs/serving.md).
"""

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import crossmod.runtime.resolvers  # noqa: F401
from crossmod.launch import preflight, serve_checks
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="serve")
@entry_point(serve_checks.serve)
def main(cfg: DictConfig) -> None:
    from crossmod.artifacts.bases import base_overrides
    from crossmod.serving.api import CultureAPI
    from crossmod.serving.memes import Limits, Meme
    from crossmod.serving.server import build, cards, run

    folders = preflight.adapter_folders(cfg)
    limits = cfg.limits
    Meme.limits = Limits(max_memes=limits.max_memes, max_text_chars=limits.max_text_chars, max_image_bytes=limits.max_image_bytes)
    token = Path(cfg.auth.token_file).read_text(encoding="utf-8").strip() if cfg.auth.token_file else None
    requests = logging.getLogger("crossmod.serve.requests")
    requests.propagate, requests.level = False, logging.INFO if cfg.log_requests else logging.WARNING
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    requests.addHandler(handler)
    api = CultureAPI(
        folders,
        base_overrides(cfg.model),
        cfg.threshold,
        cfg.disagreement,
        tuple(cfg.allow_missing),
        cfg.batching.max_batch_size,
        cfg.batching.batch_timeout_s,
        cfg.threads,
    )
    server = build(
        api,
        cards(folders),
        token,
        {"max_body_bytes": limits.max_body_bytes, "max_queue": limits.max_queue},
        cfg.accelerator,
        limits.drain_s,
        limits.request_timeout_s,
    )
    print(
        f"[serve] {len(folders)} cultures on http://{cfg.host}:{cfg.port} (POST /v1/classify, GET /v1/models, /healthz, /readyz, /docs)",
        flush=True,
    )
    run(server, cfg.host, cfg.port)
    print("[serve] drained and stopped", flush=True)


if __name__ == "__main__":
    main()

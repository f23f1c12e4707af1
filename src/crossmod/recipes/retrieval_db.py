"""Labelled memes into a retrieval culture adapter, without retraining:
`crossmod retrieval-db adapter=<retrieval culture folder> shards=<shard folder> [splits=[train]] [skip_existing=true]`."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="retrieval_db")
@entry_point(
    preflight.reads(
        adapter="an exported retrieval culture folder (crossmod export kind=retrieval)", shards="a shard folder written by crossmod"
    )
)
def main(cfg: DictConfig) -> None:
    from pathlib import Path

    from omegaconf import OmegaConf

    from crossmod.artifacts.bases import base_overrides
    from crossmod.artifacts.retrieval_db import add
    from crossmod.runtime.user_errors import UserError

    splits = None if cfg.splits is None else [str(s) for s in (cfg.splits if OmegaConf.is_list(cfg.splits) else [cfg.splits])]
    try:
        counts = add(
            Path(cfg.adapter),
            str(cfg.shards),
            splits,
            cfg.skip_existing,
            cfg.batch_size,
            cfg.allow_held_out,
            base_overrides(cfg.get("model")),
        )
    except (ValueError, FileNotFoundError) as error:  # a DatabaseError is a UserError already: the one message as it is
        if isinstance(error, UserError):
            raise
        raise UserError(str(error)) from error
    print(
        f"[retrieval_db] {counts['read']} memes read: {counts['added']} added, {counts['unlabelled']} without the culture's "
        f"label and {counts['already_in']} already in the database left out → {cfg.adapter}"
    )


if __name__ == "__main__":
    main()

"""crossmod's own configs never trip its own trust check: a run built from any of them can be exported, evaluated and
extended (a retrieval export rebuilds the run's data from its config.yaml, checked against DATA_TARGETS; every
model part against TRUSTED_TARGETS). Every `_target_` of every data, eval_data, model and experiment config."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from crossmod.models.trusted_targets import DATA_TARGETS, TRUSTED_TARGETS, _walk

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FILES = sorted(
    [*CONFIGS.glob("data/*.yaml"), *CONFIGS.glob("eval_data/*.yaml"), *CONFIGS.glob("model/*.yaml"), *CONFIGS.glob("experiment/*.yaml")]
)


def _targets(node: object) -> list[tuple[str, str]]:
    return [(where, value) for where, key, value in _walk(node) if key == "_target_"]


def _sections(path: Path) -> dict[str, object]:
    """The parts of a config file a run's config.yaml carries under `data` and `model`."""
    config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    group = path.parent.name
    if group in ("data", "eval_data"):
        return {"data": config}
    if group == "model":
        return {"model": config}
    return {name: config[name] for name in ("data", "model", "eval_data") if isinstance(config, dict) and name in config}


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_target_of_crossmods_configs_passes_the_trust_check(path):
    trusted = {"data": DATA_TARGETS, "eval_data": DATA_TARGETS, "model": TRUSTED_TARGETS}
    refused = [
        (name, where, target)
        for name, section in _sections(path).items()
        for where, target in _targets(section)
        if target not in trusted[name]
    ]
    assert not refused, f"{path.relative_to(CONFIGS.parent)}: crossmod's trust check would refuse {refused}"


def test_the_walk_sees_the_targets_it_checks():
    """The test above can fail: the Multi3Hate config names a manifest summary its data section builds."""
    targets = [t for _, t in _targets(_sections(CONFIGS / "data" / "multi3hate.yaml")["data"])]
    assert "crossmod.evaluation.dataset_report.manifest_summary" in targets and "crossmod.data.memes.MemeDataModule" in targets

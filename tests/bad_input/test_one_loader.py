"""`crossmod.lib.loading.load`: the one loader every scoring job uses, for each kind of reference a user passes.

A run folder, a checkpoint inside it, the same checkpoint copied elsewhere and an exported culture all load through
it; what holds none of these is refused by name, and a job that takes exports only refuses a run folder."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from crossmod.lib.loading import NothingToLoad, each_model, load


def _heads(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.head_layers.linear.state_dict().items()}


def test_every_kind_of_reference_loads_the_weights_the_run_scored(leaky_run, exported_culture, tmp_path):
    scored, info = load(leaky_run)
    assert info["kind"] == "run" and info["run_dir"] == str(leaky_run)
    best = info["checkpoint"]
    assert best == json.loads((leaky_run / "metrics.json").read_text())["best_checkpoint"]

    inside, inside_info = load(best)  # a checkpoint inside its run: loaded as that run's, with its config
    assert inside_info["kind"] == "run" and inside_info["checkpoint"] == best
    copied = shutil.copy(best, tmp_path / "shared.ckpt")  # the same file on its own: a Lightning checkpoint
    alone, alone_info = load(copied)
    assert alone_info == {"kind": "checkpoint", "checkpoint": str(copied)}
    for other in (inside, alone):
        assert all(torch.equal(a, b) for a, b in zip(_heads(scored).values(), _heads(other).values()))

    culture, culture_info = load(exported_culture)
    assert culture_info["kind"] == "culture" and culture_info["card"]["culture"] == "US" and list(culture.heads) == ["US"]
    rows = scored.head_layers.rows("US")
    assert torch.equal(_heads(culture)["weight"], _heads(scored)["weight"][rows])


def test_a_folder_of_runs_is_scored_one_loader_each(leaky_run):
    loaders = each_model(leaky_run.parent)
    assert [name for name, _ in loaders] == [leaky_run.name]


def test_what_holds_no_model_is_refused_by_name(tmp_path, leaky_run):
    (tmp_path / "notes.txt").write_text("not a model")
    for reference in (tmp_path, tmp_path / "notes.txt"):
        with pytest.raises(NothingToLoad, match="not a run folder .*, a .ckpt, an exported culture folder"):
            load(reference)
    with pytest.raises(NothingToLoad, match="does not exist"):
        load(tmp_path / "missing")
    with pytest.raises(NothingToLoad, match="not an exported culture folder"):  # predict and retrieval-db take exports only
        load(leaky_run, expect="culture")

"""`crossmod.artifacts.loading.load`: the one loader every scoring job uses, for each kind of reference a user passes.

A run folder, a checkpoint inside it, the same checkpoint copied elsewhere and an exported culture all load through
it; what holds none of these is refused by name, and a job that takes exports only refuses a run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from crossmod.artifacts.loading import NothingToLoad, each_model, load


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


def _run_copy(leaky_run, tmp_path):
    """A shared run folder: the run's files, its checkpoints included, in a folder of someone else's making."""
    return shutil.copytree(leaky_run, tmp_path / "shared" / "run", ignore=shutil.ignore_patterns("wandb"), symlinks=True)


def _point_best_at(run, pointer):
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**metrics, "best_checkpoint": str(pointer)}))


@pytest.mark.parametrize("pointer", ["absolute", "relative_up", "inside_then_up", "link"])
def test_a_runs_own_pointer_out_of_the_run_is_refused_before_the_outside_file_is_opened(leaky_run, tmp_path, pointer):
    """metrics.json names a checkpoint elsewhere on the machine (an absolute path, `../`, a path that enters the run
    and leaves it), or the run's checkpoint is a symlink out: load(run) refuses by name, never loads the outside one."""
    run = _run_copy(leaky_run, tmp_path)
    best = Path(json.loads((leaky_run / "metrics.json").read_text())["best_checkpoint"])
    private = tmp_path / "private" / "weights.ckpt"
    private.parent.mkdir()
    shutil.copy(best, private)
    own = run / "checkpoints" / best.name
    pointers = {
        "absolute": private,
        "relative_up": f"../../private/{private.name}",
        "inside_then_up": run / "checkpoints" / ".." / ".." / ".." / "private" / private.name,
    }
    if pointer == "link":
        own.unlink()
        own.symlink_to(private)
        _point_best_at(run, own)
    else:
        _point_best_at(run, pointers[pointer])
    opened = []
    original = torch.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "load", lambda f, *a, **k: opened.append(str(f)) or original(f, *a, **k))
        with pytest.raises(NothingToLoad, match=r"outside the run folder|outside .*crossmod reads files inside it only"):
            load(run)
    assert not any("private" in path for path in opened), opened


def test_a_moved_run_loads_its_own_checkpoints_by_their_recorded_names(leaky_run, tmp_path):
    """A run copied to another machine records the old machine's absolute paths: they are read within the run."""
    run = _run_copy(leaky_run, tmp_path)
    scored, _ = load(leaky_run)
    moved, info = load(run)
    assert Path(info["checkpoint"]).parent == (run / "checkpoints").absolute()
    assert all(torch.equal(a, b) for a, b in zip(_heads(scored).values(), _heads(moved).values()))


BOMB = "".join(f"{a}: &{a} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['x'] * 9)}]\n" for p, a in zip(" abcdefgh", "abcdefghi"))


def test_a_yaml_bomb_in_a_runs_config_is_refused_by_name_not_expanded(leaky_run, tmp_path):
    """Nine lines of anchors expand to 9^9 strings; crossmod writes no anchors, so a config holding one is refused."""
    from crossmod.artifacts.runs import RunConfigError

    run = _run_copy(leaky_run, tmp_path)
    (run / "config.yaml").write_text(BOMB + (leaky_run / "config.yaml").read_text())
    with pytest.raises(RunConfigError, match=r"config.yaml: holds YAML anchors or aliases"):
        load(run)
    (run / "config.yaml").write_bytes(b"a: b\n" * (2 << 20))
    with pytest.raises(RunConfigError, match=r"bytes, more than a run's config"):
        load(run)

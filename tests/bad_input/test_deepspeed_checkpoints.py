"""A shared run folder whose checkpoint is a DeepSpeed checkpoint *directory* is data, never code.

DeepSpeed's own reader (`zero_to_fp32`) unpickles every shard with `weights_only=False`, and follows
the directory's `latest` tag wherever it points. The attacks: shards that run a payload when
unpickled (shown live first: the trusting loader does write the marker), handed to
`crossmod consolidate` and `export.py run=<run>`; a `latest` tag that climbs out of the
checkpoint, and a tag folder or shard that is a symlink out of it. Each must be refused with the
file named and the fix (consolidate where the checkpoint was made), with no marker and no output.
An honest checkpoint built the way DeepSpeed writes one (its loss scaler and stage enum included)
still reads through the safe path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from crossmod.artifacts.consolidate import zero_state_dict
from tests.conftest import ROOT, scaled
from tests.zygote import run_python

FIX = "consolidate it on the machine that trained it"


class Payload:
    """Unpickling this writes `marker`: whoever loads it with weights_only=False runs attacker code."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"import pathlib; pathlib.Path({self.marker!r}).write_text('payload ran')",)


def evil_checkpoint(directory: Path, marker: Path, tag: str = "global_step1") -> Path:
    """A DeepSpeed-looking checkpoint directory (`latest` + a tag folder of shards) whose shards carry the payload."""
    shards = directory / tag
    shards.mkdir(parents=True)
    (directory / "latest").write_text(tag)
    for kind in ("model", "optim"):
        torch.save({"module": Payload(marker), "buffer_names": []}, shards / f"zero_pp_rank_0_mp_rank_00_{kind}_states.pt")
    return directory


def _live(path: Path, marker: Path) -> None:
    code = f"import torch; torch.load({str(path)!r}, weights_only=False)"
    run_python([sys.executable, "-c", code], capture_output=True, timeout=scaled(120))
    assert marker.read_text() == "payload ran", "the payload is not live: this test could not fail"
    marker.unlink()


def _consolidate(checkpoint: Path, output: Path) -> subprocess.CompletedProcess:
    return run_python(
        [sys.executable, "-m", "crossmod.recipes.consolidate", f"checkpoint={checkpoint}", f"output={output}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )


def test_consolidate_refuses_shards_that_would_run_code(tmp_path):
    marker = tmp_path / "marker"
    evil = evil_checkpoint(tmp_path / "epoch003.ckpt", marker)
    _live(evil / "global_step1" / "zero_pp_rank_0_mp_rank_00_model_states.pt", marker)

    result = _consolidate(evil, tmp_path / "out" / "model.safetensors")

    assert result.returncode != 0
    assert not marker.exists(), "consolidate unpickled the shard and ran its payload"
    assert "zero_pp_rank_0_mp_rank_00_model_states.pt" in result.stderr and FIX in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_run_whose_best_checkpoint_is_a_payload_directory(leaky_run, tmp_path):
    run = Path(shutil.copytree(leaky_run, tmp_path / "run", ignore=shutil.ignore_patterns("*.ckpt", "wandb")))
    marker = tmp_path / "marker"
    evil = evil_checkpoint(run / "checkpoints" / "epoch001.ckpt", marker)
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["best_checkpoint"] = str(evil)
    (run / "metrics.json").write_text(json.dumps(metrics))

    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    result = run_python(
        [sys.executable, str(ROOT / "export.py"), f"run={run}", "culture=US", f"out={tmp_path / 'export'}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )

    assert result.returncode != 0
    assert not marker.exists(), "export.py unpickled the run's checkpoint and ran its payload"
    assert "epoch001.ckpt" in result.stderr and FIX in result.stderr, result.stderr[-3000:]
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("way_out", ["dotdot", "absolute", "symlinked_tag", "symlinked_shard", "symlinked_latest"])
def test_a_latest_tag_or_shard_leading_out_of_the_checkpoint_is_refused(way_out, tmp_path):
    marker = tmp_path / "marker"
    outside = evil_checkpoint(tmp_path / "elsewhere", marker, tag="global_step9")
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint.mkdir(parents=True)
    if way_out == "dotdot":
        (checkpoint / "latest").write_text("../../../elsewhere/global_step9")
    elif way_out == "absolute":
        (checkpoint / "latest").write_text(str(outside / "global_step9"))
    elif way_out == "symlinked_tag":
        (checkpoint / "latest").write_text("global_step9")
        (checkpoint / "global_step9").symlink_to(outside / "global_step9")
    elif way_out == "symlinked_shard":
        (checkpoint / "latest").write_text("global_step9")
        (checkpoint / "global_step9").mkdir()
        for shard in (outside / "global_step9").iterdir():
            (checkpoint / "global_step9" / shard.name).symlink_to(shard)
    else:  # the tag file itself: a symlink to a file outside, read as the tag
        (checkpoint / "latest").symlink_to(outside / "latest")
        (checkpoint / "global_step9").symlink_to(outside / "global_step9")

    with pytest.raises(ValueError, match=r"outside|leaves|absolute") as refused:
        zero_state_dict(checkpoint)

    assert str(checkpoint) in str(refused.value)
    assert not marker.exists(), "the reader followed the checkpoint's tag out of it and ran the payload found there"


def _honest_zero3(directory: Path, weight: torch.Tensor, bias: torch.Tensor) -> Path:
    """Two ranks' shards as DeepSpeed ZeRO-3 writes them: model states (shapes) and optimizer states (flat fp32
    partitions), with DeepSpeed's own loss scaler object and stage enum pickled inside."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    shards = directory / "checkpoint"
    shards.mkdir(parents=True)
    (directory / "latest").write_text("checkpoint")
    # each parameter split in two (padded to even): rank 0 holds the first halves, rank 1 the second
    halves = [torch.cat([weight.flatten()[:3], bias]), torch.cat([weight.flatten()[3:], torch.zeros(1)])]
    shapes = [{"_forward_module.head.weight": weight.shape, "_forward_module.head.bias": bias.shape}]
    for rank in (0, 1):
        model = {"module": {}, "buffer_names": [], "param_shapes": shapes, "shared_params": {}, "ds_version": "0.19.8"}
        torch.save(model, shards / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
        optimizer = {
            "zero_stage": ZeroStageEnum.weights,
            "partition_count": 2,
            "loss_scaler": LossScaler(1.0),
            "fp32_flat_groups": [halves[rank]],
        }
        torch.save({"optimizer_state_dict": optimizer, "ds_config": {}}, shards / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    return directory


def test_an_honest_zero3_checkpoint_still_reads_as_weights_only(tmp_path):
    weight, bias = torch.arange(6.0).reshape(2, 3), torch.tensor([7.0])
    state = zero_state_dict(_honest_zero3(tmp_path / "last.ckpt", weight, bias))
    assert set(state) == {"head.weight", "head.bias"}
    assert torch.equal(state["head.weight"], weight) and torch.equal(state["head.bias"], bias)


def test_resuming_a_planted_deepspeed_checkpoint_runs_no_code(tmp_path):
    """`train.py ckpt_path=X.ckpt strategy=deepspeed_zero2` with X.ckpt a directory whose shards carry a payload:
    refused before anything is built, naming the shard; the payload never runs."""
    marker = tmp_path / "marker"
    checkpoint = evil_checkpoint(tmp_path / "X.ckpt", marker, tag="checkpoint")
    shard = checkpoint / "checkpoint" / "zero_pp_rank_0_mp_rank_00_model_states.pt"
    shard.rename(checkpoint / "checkpoint" / "mp_rank_00_model_states.pt")
    _live(checkpoint / "checkpoint" / "mp_rank_00_model_states.pt", marker)
    result = run_python(
        [
            sys.executable,
            str(ROOT / "train.py"),
            f"ckpt_path={checkpoint}",
            "strategy=deepspeed_zero2",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "mp_rank_00_model_states.pt" in result.stderr and "which only unpickling would build" in result.stderr, result.stderr[-3000:]
    assert not marker.exists() and not (tmp_path / "logs").exists()

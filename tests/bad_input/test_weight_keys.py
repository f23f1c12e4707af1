"""Weights that are not the model are refused by name: a consolidated file holding no tensor, or only one head bias,
loaded with exit 0 and was scored under the run's name with its untrained parts random. Only what the format
documents may be absent: the frozen base of an `exclude_frozen_parameters` checkpoint."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from crossmod.artifacts.consolidate import WeightsMismatch, restore_weights
from crossmod.artifacts.loading import load


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base, self.head = nn.Linear(3, 3), nn.Linear(3, 2)
        self.base.requires_grad_(False)  # a frozen base


def test_a_file_with_every_trained_weight_loads_and_the_frozen_base_may_be_absent():
    model, trained = Tiny(), {k: torch.full_like(v, 0.5) for k, v in Tiny().head.state_dict().items()}
    restore_weights(model, {f"head.{k}": v for k, v in trained.items()})
    assert torch.equal(model.head.weight, torch.full((2, 3), 0.5))


@pytest.mark.parametrize(
    "state, said",
    [
        ({}, r"lacks 2 of the model's 2 trained weights: \['head.bias', 'head.weight'\]"),
        ({"head.bias": torch.zeros(2)}, r"lacks 1 of the model's 2 trained weights: \['head.weight'\]"),
        ({"head.bias": torch.zeros(2), "head.weight": torch.zeros(2, 3), "extra.weight": torch.zeros(1)}, r"not in the model: \['extra.weight'\]"),
    ],
)
def test_missing_trained_or_unexpected_weights_are_refused_by_name(state, said):
    with pytest.raises(WeightsMismatch, match=said):
        restore_weights(Tiny(), state)


@pytest.mark.parametrize("kept", ["nothing", "one_head_bias"])
def test_a_runs_consolidated_file_without_its_weights_is_refused(leaky_run, tmp_path, kept):
    run = shutil.copytree(leaky_run, tmp_path / "run", ignore=shutil.ignore_patterns("wandb"))
    model, _ = load(run)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    bias = next(k for k in state if k.startswith("head_layers") and k.endswith("bias"))
    planted = run / "checkpoints" / "consolidated.safetensors"
    save_file({} if kept == "nothing" else {bias: state[bias]}, str(planted))
    with pytest.raises(WeightsMismatch, match=r"the checkpoint lacks \d+ of the model's \d+ trained weights"):
        load(run, checkpoint=str(planted))
    assert json.loads((run / "metrics.json").read_text())["best_checkpoint"]  # the run itself is untouched

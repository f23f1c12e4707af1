"""Training computes with subnormal floats flushed to zero: Adam's second moments of weights whose gradients
fade sink there, and x86 arithmetic on them is microcoded (a tiny VLM's CPU epoch went from 15 s to 3.5 min
under data.ablate=image before this)."""

from __future__ import annotations

import inspect

import torch

from crossmod.training import pipeline


def test_subnormals_are_flushed_once_training_starts():
    subnormal = torch.tensor([1e-39])
    try:
        torch.set_flush_denormal(False)
        assert (subnormal * 1.0).item() != 0.0
        pipeline.flush_subnormals()
        assert (subnormal * 1.0).item() == 0.0
    finally:
        torch.set_flush_denormal(False)
    assert "flush_subnormals()" in inspect.getsource(pipeline.run)

"""A finished run destroys its process group itself: left to interpreter exit, gloo's threads were destroyed while
joinable and a rank whose numbers were all written aborted, so SLURM marked the job FAILED."""

from __future__ import annotations

import torch.distributed as dist

from crossmod.training.pipeline import close_process_group


def test_a_finished_run_closes_the_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    close_process_group()
    assert not dist.is_initialized()
    close_process_group()  # a run without one (one process, no strategy) passes through

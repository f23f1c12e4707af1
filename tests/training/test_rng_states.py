"""RNG states travel in checkpoints: a resumed fit draws what the uninterrupted fit drew after the checkpoint.

Uses the recording fits of tests/data/test_stream_position.py: every training step draws once from
torch's RNG, checkpoints are written mid-epoch and at an epoch's end.
"""

from __future__ import annotations

import pytest

from crossmod.training.callbacks.rng_states import RngStates
from tests.data.test_stream_position import MID, SaveAt, fit, shard_root  # noqa: F401


@pytest.mark.parametrize("workers", [0, 2])  # a new loader iterator at every epoch start, or persistent workers
def test_resumed_fit_draws_what_the_uninterrupted_fit_drew(shard_root, tmp_path, workers):  # noqa: F811
    full = fit(shard_root, workers, [SaveAt(tmp_path), RngStates()])
    per_epoch = sum(1 for epoch, *_ in full if epoch == 0)  # an epoch is a pass over the training memes
    for checkpoint, done in (("mid.ckpt", MID[0] * per_epoch + MID[1] + 1), ("end0.ckpt", per_epoch)):
        resumed = fit(shard_root, workers, [RngStates()], ckpt_path=tmp_path / checkpoint)
        assert resumed == full[done:], f"resumed from {checkpoint}"
        unrestored = fit(shard_root, workers, [], ckpt_path=tmp_path / checkpoint)
        assert [draw for *_, draw in unrestored] != [draw for *_, draw in full[done:]]

"""Sample dicts become a batch one way: each sample prepared, then the batch collated (in loader workers too)."""

from __future__ import annotations

import pickle

from torch.utils.data import DataLoader

from crossmod.data.batches import SamplesToBatch


class Recording:
    """A preprocessor that tags what it prepared, so the test sees both steps happen in order."""

    def __call__(self, sample):
        return {"id": sample["id"], "prepared": True}

    def collate(self, features):
        assert all(f["prepared"] for f in features)
        return {"ids": [f["id"] for f in features]}


def test_samples_become_one_batch_in_workers_and_in_process():
    samples = [{"id": str(i)} for i in range(5)]
    to_batch = SamplesToBatch(Recording())
    assert to_batch(samples) == {"ids": ["0", "1", "2", "3", "4"]}
    assert pickle.loads(pickle.dumps(to_batch))(samples[:2]) == {"ids": ["0", "1"]}
    loader = DataLoader(samples, batch_size=2, num_workers=1, collate_fn=to_batch)
    assert [batch["ids"] for batch in loader] == [["0", "1"], ["2", "3"], ["4"]]

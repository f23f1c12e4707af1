"""An embedding cache or tags file that reads cleanly but cannot rank anything is refused, not used.

A checksum says a file is the one written, not that its numbers mean anything: an attacker (or a
broken model) writes NaN rows or one row repeated, with the checksum recomputed, and retrieval used
to rank every query's pool in file order ("the first k pool memes") while the report still said
image retrieval. Each cache is built with the real writer, read by the real few-shot table builder,
and must be refused naming the file and the fix. A tags file whose every tag is blank is refused the
same way; a query that retrieval cannot rank (its scores all equal) is counted in the results.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from crossmod.prompting.clip_embeddings import cache_file, model_identity, write_cache
from crossmod.prompting.fewshot import FewShotRun, build_table
from crossmod.prompting.fewshot_prompts import FewShotPrompt
from tests.conftest import ROOT

DATASET = "toxictags"


def memes(n: int = 6) -> list[dict]:
    return [
        {
            "id": f"{DATASET}/{i}",
            "group": f"g{i}",
            "split": "test" if i < 2 else "train",
            "image": b"",
            "labels": {"toxic": i % 2},
            "meta": {"tags": [f"tag {i % 3}"], "title": f"meme {i}"},
        }
        for i in range(n)
    ]


@pytest.fixture
def settings(tmp_path: Path):
    clip = tmp_path / "clip"
    clip.mkdir()
    (clip / "config.json").write_text("{}")
    return OmegaConf.create({"clip": str(clip), "clip_batch_size": 2, "cache_dir": str(tmp_path / "embeddings"), "tags_file": None})


def plant(settings, kind: str, key: str, keys: list[str], rows: np.ndarray) -> Path:
    """The attacker's cache file where build_table looks, written by the real writer (checksum recomputed)."""
    identity = model_identity(settings.clip)
    path = cache_file(settings.cache_dir, kind, key, identity)
    write_cache(path, keys, rows, identity)
    return path


@pytest.mark.parametrize(
    "rows, problem",
    [
        (np.full((6, 4), np.nan, np.float32), "6 of 6 rows are not finite"),
        (np.ones((6, 4), np.float32), "all 6 rows are the same"),
        (np.zeros((6, 4), np.float32), "6 of 6 rows are zero"),
    ],
    ids=["nan", "identical", "zero"],
)
def test_an_image_cache_that_cannot_rank_is_refused(settings, rows, problem):
    records = memes()
    path = plant(settings, "images", "ds-1", [r["id"] for r in records], rows)
    with pytest.raises(ValueError) as refused:
        build_table(settings, records, ["image"], "ds-1", DATASET, torch.device("cpu"))
    message = str(refused.value)
    assert str(path) in message and problem in message and "delete it to recompute" in message


def test_an_all_blank_tags_file_is_refused(settings, tmp_path):
    tags_file = tmp_path / "generated.jsonl"
    tags_file.write_text("".join(json.dumps({"id": str(i), "tags": ["", "  "]}) + "\n" for i in range(6)))
    settings.tags_file = str(tags_file)
    with pytest.raises(ValueError, match=rf"{tags_file}: every tag is blank.*crossmod train experiment=toxictags_tag_generator"):
        build_table(settings, memes(), ["generated_tags"], "ds-1", DATASET, torch.device("cpu"))


class SaysNormal:
    """A generator that answers every prompt; the retrieval, not the model, is under test."""

    def answer(self, chats: list) -> list[str]:
        return ["normal"] * len(chats)


def test_queries_retrieval_cannot_rank_are_counted(settings, tmp_path):
    records = memes()
    tags_file = tmp_path / "generated.jsonl"
    tags_file.write_text(json.dumps({"id": "0", "tags": []}) + "\n" + json.dumps({"id": "1", "tags": ["tag 1"]}) + "\n")
    settings.tags_file = str(tags_file)
    vocabulary = sorted({t for r in records for t in r["meta"]["tags"]})
    import hashlib

    key = "tags-" + hashlib.sha256(json.dumps(vocabulary).encode()).hexdigest()[:12]
    plant(settings, "tags", key, vocabulary, np.eye(len(vocabulary), 4, dtype=np.float32))
    table, _ = build_table(settings, records, ["generated_tags"], "ds-1", DATASET, torch.device("cpu"))
    prompt = FewShotPrompt.from_config(
        OmegaConf.to_container(OmegaConf.load(ROOT / "configs/experiment/toxictags_fewshot.yaml").fewshot.prompt)
    )
    session = FewShotRun(table, SaysNormal(), prompt, seed=0)
    result = session.score("test", "generated_tags", 1, 2, [0, 1], [2, 3, 4, 5], None)
    assert result["unranked"] == 1  # meme 0 has no generated tags: its exemplars are the pool's first two, by position

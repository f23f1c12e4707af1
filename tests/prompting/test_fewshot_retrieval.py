"""Exemplar retrieval against hand computations, answer parsing, stage scores and the embedding cache.

Embeddings are hand-made 2-D vectors; the expected exemplars below were worked out on paper (the cosines
are written next to them), not produced by the code under test."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from crossmod.evaluation.fewshot_scores import parse_stage_answer, stage_scores
from crossmod.prompting.clip_embeddings import cached_embeddings, read_cache
from crossmod.prompting.exemplar_pool import MemeTable, read_tags_file, strategies_asked
from crossmod.prompting.exemplars import heldout_split, random_exemplars, search_alpha, tag_similarity

TAGS = ["cat", "dog", "war", "vote"]
TAG_VECTORS = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])  # unit vectors
# cat·dog 0.8, cat·war 0, cat·vote -0.6, dog·war 0.6, dog·vote 0, war·vote 0.8


def record(meme_id: str, tags: list[str], group: str | None = None, split: str = "train") -> dict:
    return {"id": meme_id, "group": group or meme_id, "split": split, "labels": {}, "meta": {"tags": tags}}


def table(records: list[dict], images: list[list[float]], generated: dict[int, list[str]] | None = None) -> MemeTable:
    index = {t: i for i, t in enumerate(TAGS)}
    return MemeTable(
        records=records,
        image_vectors=np.array(images, dtype=float),
        tag_vectors=TAG_VECTORS,
        gt_tags=[[index[t] for t in r["meta"]["tags"]] for r in records],
        generated_tags={p: [index[t] for t in tags] for p, tags in (generated or {}).items()},
    )


@pytest.fixture
def memes() -> MemeTable:
    """A query q (image (1, 0), tags cat + war) and four training memes."""
    records = [
        record("q", ["cat", "war"], split="test"),
        record("e0", ["dog"]),  # image cos 0;     tags: cat→0.8, war→0.6: 0.7
        record("e1", ["vote"]),  # image cos 1;     tags: cat→-0.6, war→0.8: 0.1
        record("e2", ["cat", "vote"]),  # image cos -1; tags: cat→1, war→0.8: 0.9
        record("e3", []),  # image cos 0.6;   no tags: -1
    ]
    return table(records, [[1, 0], [0, 1], [1, 0], [-1, 0], [0.6, 0.8]])


def ids(memes: MemeTable, positions) -> list[str]:
    return [memes.records[p]["id"] for p in positions]


def test_image_retrieval_picks_the_hand_computed_exemplars():
    # query (2, 1): cos with (1,0) = 2/√5 = .894, (0,1) = .447, (1,1) = 3/√10 = .949, (-1,0) = -.894
    records = [record("q", [], split="test"), *(record(f"p{i}", []) for i in range(4))]
    memes = table(records, [[2, 1], [1, 0], [0, 1], [1, 1], [-1, 0]])
    assert ids(memes, memes.exemplars("image", [0], [1, 2, 3, 4], 2, seed=0)[0]) == ["p2", "p0"]
    assert ids(memes, memes.exemplars("image", [0], [1, 2, 3, 4], 3, seed=0)[0]) == ["p2", "p0", "p1"]


def test_tag_similarity_is_the_mean_over_query_tags_of_the_best_exemplar_tag(memes):
    scores = tag_similarity([[0, 2]], [[1], [3], [0, 3], []], TAG_VECTORS)
    assert scores[0] == pytest.approx([0.7, 0.1, 0.9, -1.0])
    assert tag_similarity([[]], [[1]], TAG_VECTORS)[0] == pytest.approx([0.0])  # a tagless query cannot rank by tags
    assert ids(memes, memes.exemplars("tags", [0], [1, 2, 3, 4], 2, seed=0)[0]) == ["e2", "e0"]


def test_image_and_tags_combined_by_alpha(memes):
    pool = [1, 2, 3, 4]
    # α = .5: e0 .5·0 + .5·.7 = .35, e1 .5·1 + .5·.1 = .55, e2 .5·(-1) + .5·.9 = -.05, e3 .5·.6 + .5·(-1) = -.2
    assert ids(memes, memes.exemplars("image_tags", [0], pool, 2, seed=0, alpha=0.5)[0]) == ["e1", "e0"]
    assert ids(memes, memes.exemplars("image", [0], pool, 2, seed=0)[0]) == ["e1", "e3"]  # image alone: 1, .6
    assert ids(memes, memes.exemplars("image_tags", [0], pool, 2, seed=0, alpha=1.0)[0]) == ["e1", "e3"]
    assert ids(memes, memes.exemplars("image_tags", [0], pool, 2, seed=0, alpha=0.0)[0]) == ["e2", "e0"]
    # α = .8: e0 .14, e1 .82, e2 -.62, e3 .28
    assert ids(memes, memes.exemplars("image_tags", [0], pool, 3, seed=0, alpha=0.8)[0]) == ["e1", "e3", "e0"]


def test_generated_tags_replace_the_query_tags_only(memes):
    generated = table(memes.records, memes.image_vectors.tolist(), generated={0: ["vote"]})
    # query tag vote: e0 dog→0, e1 vote→1, e2 max(cat -.6, vote 1) = 1, e3 -1 (exemplars keep their own tags)
    assert ids(generated, generated.exemplars("generated_tags", [0], [1, 2, 3, 4], 2, seed=0)[0]) == ["e1", "e2"]
    with pytest.raises(ValueError, match="no tags for 1 queried memes"):
        memes.exemplars("generated_tags", [0], [1, 2, 3, 4], 2, seed=0)


def test_the_query_and_its_group_are_never_exemplars():
    records = [record("q", ["cat"], split="test"), record("q", ["cat"]), record("q-copy", ["cat"], group="q"), record("far", ["war"])]
    memes = table(records, [[1, 0], [1, 0], [1, 0], [0, 1]])
    for strategy, alpha in (("image", None), ("tags", None), ("image_tags", 0.5), ("random", None)):
        assert ids(memes, memes.exemplars(strategy, [0], [1, 2, 3], 1, seed=3, alpha=alpha)[0]) == ["far"]
    with pytest.raises(ValueError, match="only 1 allowed"):
        memes.exemplars("image", [0], [1, 2, 3], 2, seed=0)


def test_random_exemplars_are_seeded_per_query():
    forbidden = np.zeros((3, 10), dtype=bool)
    forbidden[1, 4] = True
    first = random_exemplars(["a", "b", "c"], 4, forbidden, seed=7)
    assert (first == random_exemplars(["a", "b", "c"], 4, forbidden, seed=7)).all()
    assert (first[1] == random_exemplars(["b"], 4, forbidden[1:2], seed=7)[0]).all()  # independent of the other queries
    assert 4 not in first[1] and all(len(set(row)) == 4 for row in first)
    assert not (first == random_exemplars(["a", "b", "c"], 4, forbidden, seed=8)).all()


def test_alpha_search_takes_the_first_best_of_the_grid_and_heldout_is_seeded():
    best, scores = search_alpha([0.0, 0.5, 1.0], lambda a: {0.0: 0.2, 0.5: 0.6, 1.0: 0.6}[a])
    assert best == 0.5 and scores == {0.0: 0.2, 0.5: 0.6, 1.0: 0.6}
    held, rest = heldout_split([f"m{i}" for i in range(10)], 3, seed=1)
    assert (
        len(held) == 3 and sorted(held + rest) == list(range(10)) and heldout_split([f"m{i}" for i in range(10)], 3, seed=1) == (held, rest)
    )


def test_strategy_names():
    assert strategies_asked("all", None) == ["random", "image", "tags", "image_tags"]
    assert strategies_asked("all", "t.jsonl")[-2:] == ["generated_tags", "image_generated_tags"]
    assert strategies_asked(["image", "tags"], None) == ["image", "tags"]
    with pytest.raises(ValueError, match="choose all, or among"):
        strategies_asked("imag", None)
    with pytest.raises(ValueError, match="fewshot.tags_file"):
        strategies_asked("generated_tags", None)


def test_tags_file_is_read_and_bad_lines_are_named(tmp_path):
    good = tmp_path / "tags.jsonl"
    good.write_text('{"id": "a1", "tags": ["cats", " dogs "]}\n\n{"id": "toxictags/7", "tags": []}\n')
    assert read_tags_file(good, "toxictags") == {"toxictags/a1": ["cats", "dogs"], "toxictags/7": []}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a1", "tags": ["cats"]}\n{"id": "a2", "tags": "cats"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: \"tags\" must be a list of strings"):
        read_tags_file(bad, "toxictags")
    bad.write_text('{"id": "a1", "tags": []}\n{"id": "a1", "tags": []}\n')
    with pytest.raises(ValueError, match="line 2: id a1 appears twice"):
        read_tags_file(bad, "toxictags")


@pytest.mark.parametrize(
    "text, stage, expected",
    [
        ("toxic", 1, 1),
        ("Normal.", 1, 0),
        ("This meme is non-toxic", 1, 0),
        ("It is not toxic at all", 1, 0),
        ("toxic or normal", 1, None),
        ("I cannot tell", 1, None),
        ("Offensive", 2, 2),
        ("dangerous", 2, 1),
        ("Hate speech", 2, 0),
        ("normal, it is not hateful", 2, 3),
        ("hateful and offensive", 2, None),
        ("toxic", 2, None),
        ("", 2, None),
    ],
)
def test_answers_are_read_as_one_class_or_invalid(text, stage, expected):
    assert parse_stage_answer(text, stage) == expected


def test_stage_scores_equal_sklearn_with_invalid_answers_wrong():
    gold = [0, 1, 2, 3, 3, 0]
    predicted = [0, None, 2, 3, 0, None]
    scores = stage_scores(gold, predicted)
    # by hand over the classes present (0..3): F1 class 0 = 2·1/(2·1+1+1) = .5, class 1 = 0, class 2 = 1, class 3 = 2/3
    assert scores["macro_f1"] == pytest.approx((0.5 + 0 + 1 + 2 / 3) / 4)
    as_wrong = f1_score(gold, [0, -1, 2, 3, 0, -1], labels=[0, 1, 2, 3], average="macro", zero_division=0)
    assert scores["macro_f1"] == pytest.approx(as_wrong)
    assert scores["invalid"] == 2 and scores["items"] == 6 and scores["accuracy"] == pytest.approx(3 / 6)


def test_embedding_cache_is_reused_and_a_damaged_file_is_refused(tmp_path):
    calls = []

    def compute(keys):
        calls.append(list(keys))
        return np.arange(len(keys) * 3, dtype=np.float32).reshape(len(keys), 3)

    path = tmp_path / "cache" / "x.safetensors"
    first, hit = cached_embeddings(path, ["a", "b", "c"], compute, "clip@1")
    assert not hit and len(calls) == 1
    again, hit = cached_embeddings(path, ["c", "a"], compute, "clip@1")
    assert hit and len(calls) == 1 and (again == first[[2, 0]]).all()
    with pytest.raises(ValueError, match="lacks 1 of the keys"):
        read_cache(path, ["a", "z"])
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # one byte of the numbers
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="x.safetensors: damaged embedding cache"):
        cached_embeddings(path, ["a"], compute, "clip@1")
    path.write_bytes(bytes(data[:40]))  # truncated
    with pytest.raises(ValueError, match="x.safetensors: damaged embedding cache"):
        cached_embeddings(path, ["a"], compute, "clip@1")
    assert len(calls) == 1

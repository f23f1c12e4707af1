"""Tag similarity against hand computations: max cosine over generated tags, mean over gold tags, then memes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crossmod.evaluation.tag_similarity import cosine_matrix, markdown, meme_tag_similarity, summarise


def test_a_meme_scores_each_gold_tags_best_match_averaged():
    gold = np.array([[1.0, 0.0], [0.0, 1.0]])
    generated = np.array([[1.0, 1.0], [1.0, 0.0]])
    # gold 1: cos with (1,1) = 1/√2, with (1,0) = 1 → 1; gold 2: 1/√2 and 0 → 1/√2
    assert meme_tag_similarity(gold, generated) == pytest.approx((1 + 1 / math.sqrt(2)) / 2)


def test_random_embeddings_equal_a_direct_numpy_cosine():
    rng = np.random.default_rng(3)
    gold, generated = rng.normal(size=(4, 7)), rng.normal(size=(3, 7))
    best = [max(float(g @ t) / (np.linalg.norm(g) * np.linalg.norm(t)) for t in generated) for g in gold]
    assert meme_tag_similarity(gold, generated) == pytest.approx(sum(best) / len(best), abs=1e-12)
    assert cosine_matrix(gold, generated)[2, 1] == pytest.approx(
        gold[2] @ generated[1] / np.linalg.norm(gold[2]) / np.linalg.norm(generated[1])
    )


def test_an_empty_generation_scores_zero_and_a_meme_without_gold_tags_is_not_scored():
    assert meme_tag_similarity(np.ones((2, 3)), np.zeros((0, 3))) == 0.0
    assert meme_tag_similarity(np.zeros((0, 3)), np.ones((2, 3))) is None


def test_the_summary_counts_empty_generations_and_memes_without_gold_tags():
    summary = summarise([0.5, 0.0, None, 1.0], [2, 0, 1, 3])
    assert summary.as_dict() == {"memes": 4, "scored": 3, "no_gold": 1, "empty": 1, "similarity": pytest.approx(0.5)}
    assert summarise([None], [0]).similarity is None
    table = markdown({"test": summary}, "tiny", "minilm")
    assert "| test | 4 | 3 | 1 | 1 | 0.5000 |" in table


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="zero vector"):
        cosine_matrix(np.zeros((1, 2)), np.ones((1, 2)))
    with pytest.raises(ValueError, match="2 scores but 1 generation counts"):
        summarise([0.1, 0.2], [1])

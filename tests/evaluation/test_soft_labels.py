"""The soft metrics against hand-computed cases and scipy's own entropies."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import entropy

from crossmod.evaluation.soft_labels import disagreement, soft_scores


def test_cross_entropy_and_jsd_of_hand_computed_cases():
    # one meme, p = 0.8, share = 0.5: CE = -(0.5 ln 0.8 + 0.5 ln 0.2); JSD (base 2) by its definition
    scores = soft_scores(np.array([0.8]), np.array([0.5]))
    assert scores["cross_entropy"] == pytest.approx(-(0.5 * math.log(0.8) + 0.5 * math.log(0.2)))
    m = (0.65, 0.35)
    kl = lambda a, b: sum(x * math.log2(x / y) for x, y in zip(a, b))  # noqa: E731
    assert scores["jsd"] == pytest.approx(0.5 * kl((0.8, 0.2), m) + 0.5 * kl((0.5, 0.5), m))
    assert scores["memes"] == 1 and math.isnan(scores["pearson"])  # one meme: no correlation
    same = soft_scores(np.array([0.3, 0.6]), np.array([0.3, 0.6]))
    assert same["jsd"] == pytest.approx(0.0, abs=1e-12) and same["pearson"] == pytest.approx(1.0)
    # a certain p against a share it contradicts: clipped, finite; JSD of disjoint distributions is 1
    far = soft_scores(np.array([1.0]), np.array([0.0]))
    assert math.isfinite(far["cross_entropy"]) and far["jsd"] == pytest.approx(1.0, abs=1e-5)  # p clipped to 1 - 1e-7


def test_cross_entropy_is_the_shares_entropy_plus_its_divergence_from_p_and_nan_shares_are_left_out():
    rng = np.random.default_rng(0)
    p, share = rng.uniform(0.05, 0.95, 40), rng.uniform(0, 1, 40)
    share[[3, 7]] = np.nan  # memes this culture did not vote on
    kept = ~np.isnan(share)
    expected = np.mean([entropy([s, 1 - s]) + entropy([s, 1 - s], [q, 1 - q]) for q, s in zip(p[kept], share[kept])])
    scores = soft_scores(p, share)
    assert scores["memes"] == 38 and scores["cross_entropy"] == pytest.approx(expected)
    assert scores["pearson"] == pytest.approx(np.corrcoef(p[kept], share[kept])[0, 1])
    assert soft_scores(p, np.full(40, np.nan))["memes"] == 0


def test_disagreement_compares_the_spread_across_cultures_on_memes_every_culture_voted_on():
    p = np.array([[0.1, 0.9], [0.5, 0.5], [0.2, 0.4], [0.3, 0.3]])
    shares = np.array([[0.0, 1.0], [0.5, 0.5], [0.2, 0.6], [np.nan, 0.3]])  # the last meme: one culture did not vote
    result = disagreement(p, shares)
    assert result["memes"] == 3 and result["cultures"] == 2
    assert result["predicted_spread"] == pytest.approx(np.mean([0.4, 0.0, 0.1]))
    assert result["annotated_spread"] == pytest.approx(np.mean([0.5, 0.0, 0.2]))
    assert result["pearson"] == pytest.approx(np.corrcoef([0.4, 0.0, 0.1], [0.5, 0.0, 0.2])[0, 1])
    assert result["spearman"] == pytest.approx(1.0)

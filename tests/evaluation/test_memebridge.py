"""MemeBridge prompting scores on hand-written generations and hand-made embeddings."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cosine as cosine_distance
from sklearn.metrics.pairwise import cosine_similarity

from crossmod.evaluation.memebridge import (
    markdown,
    parse_emotions,
    parse_mcq,
    parse_sentiment,
    row_cosines,
    score_choices,
    score_emotions,
    similarity,
    summarise,
)
from crossmod.evaluation.task_metrics import performance_score, ps_terms


@pytest.mark.parametrize(
    "text, letter",
    [
        ("A", "A"),
        ("b.", "B"),
        ("C) The meme mocks the Super Bowl ads", "C"),
        ("The answer is B because the caption is ironic.", "B"),
        ("Answer: c", "C"),
        ("(A)", "A"),
        ("A meme about taxes", None),  # the article, not an answer
        ("A or B", None),
        ("A: it mocks politicians\nB: it praises them", None),
        ("I think the second one", None),
        ("", None),
    ],
)
def test_mcq_answers_are_read_as_one_letter_or_invalid(text, letter):
    assert parse_mcq(text) == letter


@pytest.mark.parametrize(
    "text, label",
    [
        ("Negative", "negative"),
        ("The sentiment is positive.", "positive"),
        ("neutral", "neutral"),
        ("It is not negative, it is neutral.", "neutral"),
        ("isn't positive: negative", "negative"),
        ("positive or negative", None),
        ("It makes me laugh", None),
        ("", None),
    ],
)
def test_sentiment_answers_are_read_as_one_label_or_invalid(text, label):
    assert parse_sentiment(text) == label


@pytest.mark.parametrize(
    "text, labels",
    [
        ("sarcastic, humorous", {"sarcastic", "humorous"}),
        ("Humor and sarcasm.", {"sarcastic", "humorous"}),
        ("It is motivational but not offensive", {"motivational"}),
        ("offensive", {"offensive"}),
        ("None", set()),
        ("no emotion", set()),
        ("It is a picture of a dog", None),
        ("", None),
    ],
)
def test_emotion_answers_are_read_as_a_set_or_invalid(text, labels):
    parsed = parse_emotions(text)
    assert (parsed if parsed is None else set(parsed)) == labels


def test_choice_accuracy_counts_invalid_answers_as_wrong():
    score = score_choices(["A", "B", "C", "A"], ["A", "The answer is B.", "A or C", "A meme"], parse_mcq)
    assert score.predictions == ["A", "B", None, None]
    assert score.correct.tolist() == [True, True, False, False]
    assert (score.items, score.invalid, score.accuracy) == (4, 2, 0.5)
    sentiment = score_choices(["negative", "neutral", "positive"], ["negative", "neutral or positive", "Positive."], parse_sentiment)
    assert sentiment.accuracy == pytest.approx(2 / 3) and sentiment.invalid == 1


def test_emotion_accuracy_is_the_subset_rule_with_invalid_answers_wrong():
    # order: sarcastic, humorous, offensive, motivational
    gold = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]], dtype=bool)
    generations = [
        "sarcastic, humorous, offensive",  # ⊇ gold: correct
        "humorous",  # misses sarcastic: wrong
        "none",  # empty ⊆ empty: correct
        "a dog on a skateboard",  # invalid: wrong although gold is empty
        "not offensive, motivational",  # offensive negated: wrong
    ]
    score = score_emotions(gold, generations)
    assert score.correct.tolist() == [True, False, True, False, False]
    assert (score.accuracy, score.invalid) == (pytest.approx(0.4), 1)


def test_explanation_similarity_equals_a_direct_cosine_on_the_same_embeddings():
    rng = np.random.default_rng(0)
    generated, reference = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    direct = np.array([g @ r / (np.linalg.norm(g) * np.linalg.norm(r)) for g, r in zip(generated, reference)])
    assert row_cosines(generated, reference) == pytest.approx(direct)
    assert row_cosines(generated, reference) == pytest.approx(np.diag(cosine_similarity(generated, reference)))
    assert row_cosines(generated, reference) == pytest.approx([1 - cosine_distance(g, r) for g, r in zip(generated, reference)])
    assert similarity(generated, reference) == {"items": 5, "mean": pytest.approx(direct.mean())}
    assert row_cosines(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[2.0, 0.0], [1.0, 1.0]])) == pytest.approx([1.0, 1 / np.sqrt(2)])
    assert similarity(np.empty((0, 8)), np.empty((0, 8))) == {"items": 0, "mean": None}


def test_performance_score_with_every_term_is_the_studys_formula():
    sim_orig, sim_fmt, acc_mcq, acc_sent, acc_emo = 0.61, 0.55, 0.8, 0.5, 0.25
    by_hand = sim_orig + sim_fmt + 0.6316 * acc_mcq + 0.6316 * acc_sent + 1.7368 * acc_emo
    terms = ps_terms(acc_sent, acc_emo, acc_mcq, sim_orig, sim_fmt)
    assert terms == pytest.approx(
        {"sim_orig": 0.61, "sim_fmt": 0.55, "acc_mcq": 0.6316 * 0.8, "acc_sent": 0.6316 * 0.5, "acc_emo": 1.7368 * 0.25}
    )
    assert performance_score(acc_sent, acc_emo, acc_mcq, sim_orig, sim_fmt)["ps"] == pytest.approx(by_hand)

    scores = {
        "mcq": score_choices(["A"] * 5, ["A", "A", "A", "A", "B"], parse_mcq),  # 0.8
        "sentiment": score_choices(["positive", "negative"], ["positive", "neutral"], parse_sentiment),  # 0.5
        "emotion": score_emotions(np.array([[1, 0, 0, 0]] * 4, dtype=bool), ["sarcastic", "none", "humorous", "?"]),  # 0.25
    }
    summary = summarise(scores, {"items": 3, "invalid": 1}, {"items": 3, "mean": sim_orig}, {"items": 2, "mean": sim_fmt})
    assert summary["ps"]["value"] == pytest.approx(by_hand) and summary["ps"]["missing"] == []
    assert summary["ps"]["values"] == pytest.approx({"sim_orig": 0.61, "sim_fmt": 0.55, "acc_mcq": 0.8, "acc_sent": 0.5, "acc_emo": 0.25})
    assert sum(summary["ps"]["terms"].values()) == pytest.approx(by_hand)
    assert summary["tasks"]["emotion"] == {"items": 4, "correct": 1, "invalid": 1, "accuracy": 0.25}
    assert f"| **PS** | **{by_hand:.4f}** |" in markdown(summary)


def test_a_missing_term_leaves_ps_undefined_and_says_which():
    scores = {
        "sentiment": score_choices(["positive"], ["positive"], parse_sentiment),
        "emotion": score_emotions(np.zeros((1, 4), dtype=bool), ["none"]),
    }
    summary = summarise(scores, {"items": 0, "invalid": 0}, {"items": 0, "mean": None}, {"items": 0, "mean": None})
    assert summary["ps"]["value"] is None and summary["ps"]["missing"] == ["sim_orig", "sim_fmt", "acc_mcq"]
    assert "PS is not defined: no annotated meme for sim_orig, sim_fmt, acc_mcq." in markdown(summary)

"""Scores paired with labels for ROC curves: labelled ids only, in id order, heads without labels left out."""

from __future__ import annotations

from crossmod.evaluation.predictions import labelled_pairs


def test_pairs_hold_the_labelled_ids_of_each_head_in_id_order():
    probs = {"US": {"b": 0.2, "a": 0.9, "c": 0.5}, "DE": {"a": 0.4}}
    pairs = labelled_pairs(probs, {"US": {"c": 1, "a": 0}, "MX": {"a": 1}})
    assert list(pairs) == ["US"]
    labels, scores = pairs["US"]
    assert labels.tolist() == [0, 1] and scores.tolist() == [0.9, 0.5]  # a, c; b is not labelled

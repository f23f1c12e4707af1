"""Flip-pair accuracy on hand-made pairs: only pairs whose labels differ count, and only both decisions right is right."""

from __future__ import annotations

import math

from crossmod.evaluation.confounders import confounder_pairs, flip_pair_accuracy

SAMPLES = [
    {"id": "g1/o/en", "group": "g1", "lang": "en", "meta": {"role": "original"}},
    {"id": "g1/t/en", "group": "g1", "lang": "en", "meta": {"role": "text_confounder"}},
    {"id": "g1/i/en", "group": "g1", "lang": "en", "meta": {"role": "image_confounder"}},
    {"id": "g1/o/de", "group": "g1", "lang": "de", "meta": {"role": "original"}},
    {"id": "g1/t/de", "group": "g1", "lang": "de", "meta": {"role": "text_confounder"}},
    {"id": "g2/o/en", "group": "g2", "lang": "en", "meta": {"role": "original"}},
    {"id": "g2/i/en", "group": "g2", "lang": "en", "meta": {"role": "image_confounder"}},
    {"id": "g3/t/en", "group": "g3", "lang": "en", "meta": {"role": "text_confounder"}},  # no original: no pair
    {"id": "hm/1", "group": "hm/1", "lang": "en", "meta": {}},  # no role: no pair
]


def test_pairs_are_an_original_and_each_confounder_within_group_and_language():
    assert sorted(confounder_pairs(SAMPLES)) == sorted(
        [
            ("g1/o/en", "g1/t/en", "text"),
            ("g1/o/en", "g1/i/en", "image"),
            ("g1/o/de", "g1/t/de", "text"),
            ("g2/o/en", "g2/i/en", "image"),
        ]
    )


def test_flip_pair_accuracy_by_hand():
    pairs = confounder_pairs(SAMPLES)
    labels = {"g1/o/en": 1, "g1/t/en": 0, "g1/i/en": 1, "g1/o/de": 1, "g1/t/de": 0, "g2/o/en": 1, "g2/i/en": 0}
    # counted pairs (labels differ): g1 en text, g1 de text, g2 en image; g1 en image has equal labels
    decisions = {"g1/o/en": 1, "g1/t/en": 0, "g1/i/en": 0, "g1/o/de": 1, "g1/t/de": 1, "g2/o/en": 0, "g2/i/en": 0}
    # g1 en text: both right; g1 de text: confounder wrong; g2 en image: original wrong → 1 of 3
    assert flip_pair_accuracy(pairs, labels, decisions) == (1 / 3, 3)
    assert flip_pair_accuracy(pairs, labels, decisions, "text") == (1 / 2, 2)
    assert flip_pair_accuracy(pairs, labels, decisions, "image") == (0.0, 1)
    accuracy, count = flip_pair_accuracy(pairs, {k: 0 for k in labels}, decisions)
    assert math.isnan(accuracy) and count == 0

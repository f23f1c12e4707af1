"""The threshold is chosen on the selection split only and scored with scikit-learn on the held-out memes."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from crossmod.evaluation.thresholds import best_threshold, selection_threshold_scores


def test_the_threshold_maximises_macro_f1_on_the_selection_memes_by_hand():
    # scores 0.1 0.4 0.6 0.9 with labels 0 0 1 1: any cut between 0.4 and 0.6 separates them; the midpoint is chosen
    assert best_threshold(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.6, 0.9])) == pytest.approx(0.5)
    # every score above 0.5: at 0.5 all are called hateful (macro-F1 1/3); the chosen cut 0.75 separates them
    assert best_threshold(np.array([0, 0, 1, 1]), np.array([0.6, 0.7, 0.8, 0.9])) == pytest.approx(0.75)
    assert best_threshold(np.array([1, 1]), np.array([0.2, 0.9])) is None


def test_held_out_scores_use_the_selection_threshold_never_the_held_out_labels():
    selection = ({"US": {"a": 0.6, "b": 0.7, "c": 0.8, "d": 0.9}}, {"US": {"a": 0, "b": 0, "c": 1, "d": 1}})
    held_probs = {"US": {"e": 0.72, "f": 0.74, "g": 0.76, "h": 0.95}}
    held_labels = {"US": {"e": 0, "f": 1, "g": 1, "h": 1}}
    scores = selection_threshold_scores(selection, (held_probs, held_labels))["US"]
    assert scores["val_threshold"] == pytest.approx(0.75)  # from the selection memes; the held-out best would be 0.73
    expected = f1_score([0, 1, 1, 1], [0, 0, 1, 1], average="macro")
    assert scores["macro_f1_at_val_threshold"] == pytest.approx(expected) and scores["acc_at_val_threshold"] == pytest.approx(0.75)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_threshold_sweep_equals_scikit_learn_at_every_candidate(seed):
    # rounded scores make ties between memes and between thresholds' F1 values: the argmax must pick what sklearn's
    # per-threshold loop picks, so the sweep must equal it to the last bit, not approximately
    from crossmod.evaluation.thresholds import macro_f1, macro_f1_sweep

    rng = np.random.default_rng(seed)
    labels = (rng.random(400) < 0.3).astype(int)
    probs = np.round(np.clip(rng.normal(0.4 + 0.3 * labels, 0.2), 0, 1), 2)
    values = np.unique(probs)
    candidates = np.concatenate([[values[0] - 1], values, (values[:-1] + values[1:]) / 2, [np.nextafter(values[-1], np.inf)]])
    swept = macro_f1_sweep(labels, probs, candidates)
    assert swept.tolist() == [macro_f1(labels, probs, float(t)) for t in candidates]
    own = np.concatenate([[values[0]], (values[:-1] + values[1:]) / 2, [np.nextafter(values[-1], np.inf)]])
    loop = [macro_f1(labels, probs, float(t)) for t in own]  # the per-threshold sklearn loop best_threshold replaced
    assert best_threshold(labels, probs) == float(own[int(np.argmax(loop))])

"""Policy thresholds against hand-worked selection splits, the Wilson interval against scipy's, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest
from sklearn.metrics import precision_score, recall_score

from crossmod.evaluation.policies import Threshold, Unreachable, check_policy, choose_thresholds, cut_points, decide, held_out_rates

# selection split, by descending score: 1 1 0 1 0 1 0 0 (scores .9 .8 .7 .6 .5 .4 .3 .2)
P = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
Y = np.array([1, 1, 0, 1, 0, 1, 0, 0])


def test_precision_takes_the_lowest_threshold_meeting_it_and_recall_the_highest():
    chosen = choose_thresholds(Y, P, {"act": {"precision": 0.75}, "review": {"recall": 0.75}})
    act, review = chosen["act"], chosen["review"]
    # precision at ≥ .9, .8, .7, .6, .5, .4: 1, 1, 2/3, 3/4, 3/5, 4/6 → lowest meeting 0.75 is .6 (3 of 4 flagged)
    assert isinstance(act, Threshold) and act.threshold == 0.6 and (act.hits, act.trials, act.flagged) == (3, 4, 4)
    assert act.reached == 0.75 == precision_score(Y, P >= 0.6)
    # recall 1/4, 2/4, 2/4, 3/4 …: the highest threshold with recall ≥ .75 is .6 too; 4 positives are the trials
    assert review.threshold == 0.6 and (review.hits, review.trials) == (3, 4) and review.reached == recall_score(Y, P >= 0.6)
    low, high = binomtest(3, 4).proportion_ci(confidence_level=0.95, method="wilson")
    assert act.interval == pytest.approx((low, high))
    strict = choose_thresholds(Y, P, {"act": {"precision": 1.0}, "review": {"recall": 1.0}})
    assert strict["act"].threshold == 0.8 and strict["review"].threshold == 0.4  # the first two; every positive by .4


def test_ties_are_one_threshold():
    chosen = choose_thresholds(np.array([1, 0, 1, 0]), np.array([0.5, 0.5, 0.5, 0.1]), {"act": {"precision": 0.6}})
    assert chosen["act"].threshold == 0.5 and chosen["act"].flagged == 3 and chosen["act"].reached == pytest.approx(2 / 3)


def test_a_target_the_selection_split_cannot_meet_is_said_not_made_up():
    chosen = choose_thresholds(np.array([0, 1, 0]), np.array([0.9, 0.5, 0.1]), {"act": {"precision": 0.9}})
    assert isinstance(chosen["act"], Unreachable) and "at most 0.500" in chosen["act"].why
    none = choose_thresholds(np.zeros(3, dtype=int), np.array([0.9, 0.5, 0.1]), {"review": {"recall": 0.5}})
    assert isinstance(none["review"], Unreachable) and "no hateful meme" in none["review"].why
    assert list(decide(np.array([0.95, 0.2]), cut_points(chosen))) == ["allow", "allow"]  # an unreachable action is never taken


def test_decisions_and_held_out_rates():
    chosen = choose_thresholds(Y, P, {"act": {"precision": 1.0}, "review": {"recall": 1.0}})
    assert list(decide(np.array([0.85, 0.8, 0.5, 0.4, 0.39]), cut_points(chosen))) == ["act", "act", "review", "review", "allow"]
    y_out, p_out = np.array([1, 0, 1, 1]), np.array([0.95, 0.85, 0.3, 0.5])
    rates = held_out_rates(y_out, p_out, chosen["act"])
    assert rates == {"precision": 0.5, "recall": pytest.approx(1 / 3), "flagged": 2, "memes": 4}
    assert rates["precision"] == precision_score(y_out, p_out >= 0.8)


@pytest.mark.parametrize(
    "policy, said",
    [({}, "maps actions"), ({"remove": {"precision": 0.9}}, "not one of"), ({"act": {"f1": 0.9}}, "one target"),
     ({"act": {"precision": 1.5}}, r"not a number in \(0, 1\]"), ({"act": {"precision": 0.9, "recall": 0.5}}, "one target")],
)
def test_a_policy_that_cannot_be_applied_is_named(policy, said):
    with pytest.raises(ValueError, match=said):
        check_policy(policy)

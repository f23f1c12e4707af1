"""A run's held-out scores against its annotators' votes: the soft metrics per culture beside a constant baseline (each
culture's mean vote share on the training memes), and the cross-culture disagreement predicted against the annotated.

Computed on the held-out memes only (the test stage's predictions and those memes' votes); the baseline's constant is
fitted on the training memes. Datasets whose source gives no votes have no such record. The scores themselves are
src/crossmod/evaluation/soft_labels.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from crossmod.data.heads import GROUP_SEPARATOR, Head, group_votes, head_votes
from crossmod.evaluation.soft_labels import disagreement, soft_scores
from crossmod.runtime.user_errors import UserError

RULE = "held-out memes with their culture's votes; constant: the training memes' mean vote share of that culture"


def shares(records: list[dict[str, Any]], heads: dict[str, Head]) -> dict[str, dict[str, float]]:
    """Each binary head's vote share per meme id, for the memes that head's annotators voted on."""
    found: dict[str, dict[str, float]] = {name: {} for name, head in heads.items() if head.is_binary}
    for record in records:
        for name, (hate, total) in head_votes(record).items():
            if name in found and total:
                found[name][record["id"]] = hate / total
    return found


def check_training_votes(records: list[dict[str, Any]], heads: dict[str, Head], dataset: str) -> None:
    """An objective that trains on votes needs training memes with them: refused by name before anything trains."""
    voted = {name: len(by_id) for name, by_id in shares(records, heads).items()}
    if not any(voted.values()):
        raise UserError(
            f"model.objective trains on the annotators' votes, and the {len(records)} training memes of {dataset} carry none "
            "(meta.head_votes; Multi3Hate's raw_annotations.csv gives them)",
            "train with model/objective=cross_entropy, or on a dataset whose source gives per-annotator votes",
            "model.objective",
        )


def training_groups(records: list[dict[str, Any]], heads: dict[str, Head], by: str, dataset: str) -> list[str]:
    """The annotator groups of `by` that voted on the training memes, `<head>|<by>=<value>` sorted: the group heads
    `annotator_groups` builds. A binary head none of whose training memes has such a vote is refused by name."""
    found = sorted({key for record in records for key in group_votes(record, by) if key.split(GROUP_SEPARATOR, 1)[0] in heads})
    missing = [name for name, head in heads.items() if head.is_binary and not any(k.startswith(name + GROUP_SEPARATOR) for k in found)]
    if missing:
        present = sorted({key.split(GROUP_SEPARATOR, 1)[1].split("=", 1)[0] for record in records[:200] for key in group_votes(record)})
        raise UserError(
            f"model.objective.by={by}: no training meme of {dataset} has a vote of such a group for {missing} "
            f"(groupings its votes carry: {present or 'none'})",
            "give model.objective.by one of those, or train with model/objective=soft_votes or cross_entropy",
            "model.objective.by",
        )
    return found


def votes_on_test(
    probabilities: dict[str, dict[str, float]],
    train: Callable[[], list[dict[str, Any]]],
    test: list[dict[str, Any]],
    heads: dict[str, Head],
) -> dict[str, Any] | None:
    """Per culture the soft scores of the run and of the constant baseline on the held-out memes with votes, and the
    disagreement across cultures; None when the held-out memes carry no votes. `train` gives the training memes, read
    only when the held-out ones carry votes (a dataset without votes costs no second pass over its records)."""
    held_out = shares(test, heads)
    if not any(held_out.values()):
        return None
    fitted = shares(train(), heads)
    per_head = {}
    for name, by_id in held_out.items():
        ids = sorted(set(by_id) & set(probabilities.get(name, {})))
        if not ids:
            continue
        share = np.array([by_id[i] for i in ids])
        constant = float(np.mean(list(fitted[name].values()))) if fitted.get(name) else float("nan")
        per_head[name] = {
            "model": soft_scores(np.array([probabilities[name][i] for i in ids]), share),
            "constant": {**soft_scores(np.full(len(ids), constant), share), "share": constant},
        }
    cultures = list(per_head)
    common = sorted(set.intersection(*(set(held_out[c]) & set(probabilities[c]) for c in cultures))) if cultures else []
    p = np.array([[probabilities[c][i] for c in cultures] for i in common]).reshape(len(common), len(cultures))
    s = np.array([[held_out[c][i] for c in cultures] for i in common]).reshape(len(common), len(cultures))
    return {"rule": RULE, "heads": per_head, "disagreement": disagreement(p, s) if len(cultures) > 1 else None}

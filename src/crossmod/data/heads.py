"""The label head: what data, model and evaluation all need to know about one culture's or task's labels.

A dataset config declares its heads as `{name: {kind, classes}}` (plain data: YAML, manifests,
checkpoint hyperparameters); `Head` is that declaration typed, parsed once where a config enters
code, with what every layer derives from it: the logit width, the label tensor of a batch (-1 where
an item is not annotated) and the probabilities of logits. It lives with the data (the ground floor)
so that models and evaluation import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

KINDS = ("binary", "multiclass", "multilabel")

HeadSpecs = Mapping[str, Any]
"""A config's `heads` as written: name → {kind, classes} (a `Head` is accepted in place of a spec)."""


@dataclass(frozen=True)
class Head:
    name: str
    kind: str
    classes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"head {self.name!r} has kind {self.kind!r}; expected one of {KINDS}")
        if self.kind != "binary" and len(self.classes) < 2:
            raise ValueError(f"{self.kind} head {self.name!r} needs a list of at least two 'classes'")

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any] | Head) -> Head:
        if isinstance(spec, Head):
            return spec
        if not isinstance(spec, Mapping):
            raise ValueError(f"head {name!r} must be declared as {{kind, classes}}, got {spec!r}")
        classes = spec.get("classes")
        if classes is not None and (isinstance(classes, str) or not all(isinstance(c, str) for c in classes)):
            raise ValueError(f"head {name!r}: 'classes' must be a list of names, got {classes!r}")
        return cls(name, spec.get("kind"), tuple(classes or ()))

    @property
    def is_binary(self) -> bool:
        """One logit and a 0/1 label: the hate/non-hate heads (the only kind with a ROC curve or a verbalizer)."""
        return self.kind == "binary"

    @property
    def width(self) -> int:
        """Logits the head needs: 1 for binary, one per class otherwise."""
        return 1 if self.is_binary else len(self.classes)

    def labels(self, values: list[Any]) -> torch.Tensor:
        """The head's labels for a batch; -1 (or a row of -1) where the item is not annotated for it."""
        if self.kind == "multilabel":
            return torch.tensor([v if v is not None else [-1] * self.width for v in values], dtype=torch.float32)
        dtype = torch.float32 if self.is_binary else torch.long
        return torch.tensor([-1 if v is None else v for v in values], dtype=dtype)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(-1) if self.kind == "multiclass" else logits.sigmoid()


def parse_heads(specs: HeadSpecs) -> dict[str, Head]:
    """A config's `heads` mapping as typed heads (order kept: it is the order of the logits)."""
    return {name: Head.from_spec(name, spec) for name, spec in specs.items()}


def label_mask(target: torch.Tensor) -> torch.Tensor:
    """Items annotated for a head: labels are -1 where the source gave None."""
    return target[..., 0] >= 0 if target.dim() == 2 else target >= 0


def label_tensors(features: list[dict[str, Any]], heads: dict[str, Head]) -> dict[str, torch.Tensor]:
    """A batch's labels: one tensor per head (`Head.labels`: -1 where the head was not annotated)."""
    return {name: head.labels([f["labels"].get(name) for f in features]) for name, head in heads.items()}


def head_votes(sample: Mapping[str, Any]) -> dict[str, list[int]]:
    """A sample's annotator votes per head, `{head: [hate votes, votes]}`, where its source gives them
    (`meta.head_votes`: Multi3Hate's raw annotations, each culture's own annotator pool; MHC's `label_annotated`);
    empty otherwise."""
    return dict((sample.get("meta") or {}).get("head_votes") or {})


def vote_shares(features: list[dict[str, Any]], heads: dict[str, Head]) -> dict[str, torch.Tensor]:
    """A batch's vote shares per binary head (hate votes / votes of the head's annotators), NaN where a meme has none:
    what `soft_votes` trains on and the soft metrics score (src/crossmod/evaluation/soft_labels.py)."""
    shares = {}
    for name, head in heads.items():
        if head.is_binary:
            counts = [f.get("votes", {}).get(name) or (0, 0) for f in features]
            shares[name] = torch.tensor([hate / total if total else float("nan") for hate, total in counts], dtype=torch.float32)
    return shares


GROUP_SEPARATOR = "|"  # `<head>|<grouping>=<value>`: one annotator group's key among a head's


def group_votes(sample: Mapping[str, Any], grouping: str | None = None) -> dict[str, list[int]]:
    """A sample's votes per annotator group, `{"<head>|<grouping>=<value>": [hate votes, votes]}` (`meta.group_votes`:
    Multi3Hate's raw annotations, each culture's annotators by User ID and by attribute), only `grouping`'s if given."""
    found = (sample.get("meta") or {}).get("group_votes") or {}
    return {
        f"{head}{GROUP_SEPARATOR}{group}": list(counts)
        for head, groups in found.items()
        for group, counts in groups.items()
        if grouping is None or group.split("=", 1)[0] == grouping
    }


def group_counts(features: list[dict[str, Any]], groups: list[str]) -> torch.Tensor:
    """A batch's votes per annotator group, [memes, groups, 2] (hate votes, votes) in `groups`' order, zeros where a
    meme's annotators hold no one of a group: what `annotator_groups` trains each group's head on (built in the
    collate, so the step does no per-group Python work)."""
    rows = [[f.get("group_votes", {}).get(key) or (0, 0) for key in groups] for f in features]
    return torch.tensor(rows, dtype=torch.float32).reshape(len(features), len(groups), 2)

"""The label head: what data, model and evaluation all need to know about one culture's or task's labels.

A dataset config declares its heads as `{name: {kind, classes}}`; `Head` is that declaration typed,
with the three things every layer derives from it: the logit width, the label tensor of a batch
(-1 where an item is not annotated) and the probabilities of logits. It lives with the data (the
ground floor) so that models and evaluation import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

KINDS = ("binary", "multiclass", "multilabel")


@dataclass(frozen=True)
class Head:
    name: str
    kind: str
    classes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"head {self.name!r}: unknown kind {self.kind!r}; use binary, multiclass or multilabel")
        if self.kind != "binary" and not self.classes:
            raise ValueError(f"head {self.name!r}: a {self.kind} head needs its classes")

    @classmethod
    def from_spec(cls, name: str, spec: dict[str, Any] | Head) -> Head:
        if isinstance(spec, Head):
            return spec
        return cls(name, spec["kind"], tuple(spec.get("classes") or ()))

    @property
    def width(self) -> int:
        """Logits the head needs: 1 for binary, one per class otherwise."""
        return 1 if self.kind == "binary" else len(self.classes)

    def labels(self, values: list[Any]) -> torch.Tensor:
        """The head's labels for a batch; -1 (or a row of -1) where the item is not annotated for it."""
        if self.kind == "multilabel":
            return torch.tensor([v if v is not None else [-1] * self.width for v in values], dtype=torch.float32)
        dtype = torch.float32 if self.kind == "binary" else torch.long
        return torch.tensor([-1 if v is None else v for v in values], dtype=dtype)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(-1) if self.kind == "multiclass" else logits.sigmoid()


def parse_heads(specs: dict[str, Any]) -> dict[str, Head]:
    """A config's `heads` mapping as typed heads (order kept: it is the order of the logits)."""
    return {name: Head.from_spec(name, spec) for name, spec in specs.items()}


def label_mask(target: torch.Tensor) -> torch.Tensor:
    """Items annotated for a head: labels are -1 where the source gave None."""
    return target[..., 0] >= 0 if target.dim() == 2 else target >= 0

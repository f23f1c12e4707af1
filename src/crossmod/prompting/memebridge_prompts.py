"""The MemeBridge prompting protocol's chats: one question per task and meme, under a condition's role line.

The texts are config (`memebridge.prompts` in configs/experiment/memebridge_prompting.yaml); this module
assembles the messages the model's own chat template renders:

    [role turn: the condition's role line]   user turn: [role line + "\\n\\n"] [caption line] the image, the task's question

`role_placement`: `system` (a system turn, the default) or `user` (the role line opens the user turn, for
chat templates without a system role). The default condition has no role line, so the template's own
default (if any) stands. MCQ options are shown as "A. …\\nB. …\\nC. …" in an order that is stated:
`shuffled` (each meme's own permutation, drawn from its id and `order_seed`, so every condition and model
sees the same order) or a fixed list of the option names; the order of every meme is written to answers.csv.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossmod.data.sources.memebridge import MCQ_OPTIONS
from crossmod.evaluation.memebridge import MCQ_LETTERS, TASKS

PLACEMENTS = ("system", "user")
INPUTS = ("image", "image_caption")


@dataclass(frozen=True)
class MemeBridgePrompts:
    questions: Mapping[str, str]  # task → question; the MCQ's holds "{options}" once
    roles: Mapping[str, str | None]  # condition → role line (null: none)
    condition: str
    role_placement: str = "system"
    input: str = "image"  # image | image_caption (the caption line before the image)
    caption: str = "Caption inside the meme: '{caption}'\n"
    option_line: str = "{letter}. {option}"
    mcq_order: str | Sequence[str] = "shuffled"
    order_seed: int = 0
    fixed_order: tuple[str, ...] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        where = "memebridge.prompts"
        if self.condition not in self.roles:
            raise ValueError(f"condition={self.condition!r} is not one of {sorted(self.roles)} ({where}.roles)")
        missing = [task for task in TASKS if not self.questions.get(task)]
        if missing:
            raise ValueError(f"{where}.questions lacks {missing}")
        if self.questions["mcq"].count("{options}") != 1:
            raise ValueError(f"{where}.questions.mcq must hold '{{options}}' once, got {self.questions['mcq']!r}")
        if self.role_placement not in PLACEMENTS:
            raise ValueError(f"{where}.role_placement must be one of {PLACEMENTS}, got {self.role_placement!r}")
        if self.input not in INPUTS:
            raise ValueError(f"{where}.input must be one of {INPUTS}, got {self.input!r}")
        if self.caption.count("{caption}") != 1:
            raise ValueError(f"{where}.caption must hold '{{caption}}' once, got {self.caption!r}")
        if not all(f"{{{key}}}" in self.option_line for key in ("letter", "option")):
            raise ValueError(f"{where}.option_line must hold '{{letter}}' and '{{option}}', got {self.option_line!r}")
        if isinstance(self.mcq_order, str):
            if self.mcq_order != "shuffled":
                raise ValueError(f"{where}.mcq_order must be 'shuffled' or a list of {list(MCQ_OPTIONS)}, got {self.mcq_order!r}")
        else:
            order = tuple(str(name) for name in self.mcq_order)
            if sorted(order) != sorted(MCQ_OPTIONS):
                raise ValueError(f"{where}.mcq_order must list each of {list(MCQ_OPTIONS)} once, got {list(order)}")
            object.__setattr__(self, "fixed_order", order)

    @classmethod
    def from_config(cls, settings: Mapping[str, Any], condition: str) -> MemeBridgePrompts:
        return cls(condition=condition, **dict(settings))

    @property
    def role(self) -> str | None:
        return self.roles[self.condition] or None

    def option_order(self, meme_id: str) -> tuple[str, ...]:
        """The option names in the order shown (A, B, C) for this meme."""
        if self.fixed_order is not None:
            return self.fixed_order
        order = list(MCQ_OPTIONS)
        random.Random(f"{self.order_seed}/{meme_id}").shuffle(order)  # str seeds hash with SHA-512: the same on every run
        return tuple(order)

    def question(self, task: str, record: Mapping[str, Any]) -> str:
        """The task's question for this meme (the MCQ's with its options in this meme's order)."""
        if task != "mcq":
            return self.questions[task]
        mcq = record["meta"]["mcq"]
        lines = [
            self.option_line.format(letter=letter, option=mcq[name]) for letter, name in zip(MCQ_LETTERS, self.option_order(record["id"]))
        ]
        return self.questions["mcq"].replace("{options}", "\n".join(lines))

    def message(self, task: str, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The chat of one meme and task: [system role turn], then one user turn with the image."""
        opening = self.caption.replace("{caption}", record.get("text") or "") if self.input == "image_caption" else ""
        if self.role and self.role_placement == "user":
            opening = self.role + "\n\n" + opening
        content: list[dict[str, Any]] = [{"type": "text", "text": opening}] if opening else []
        content += [{"type": "image"}, {"type": "text", "text": self.question(task, record)}]
        turns: list[dict[str, Any]] = [{"role": "user", "content": content}]
        if self.role and self.role_placement == "system":
            turns.insert(0, {"role": "system", "content": [{"type": "text", "text": self.role}]})
        return turns

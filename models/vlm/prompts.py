"""The Multi3Hate prompts as data: 3 questions × 2 option orders, caption and country variants.

Prompt index = 2·question + order; an even index puts Hate first (option a). The texts live in the
model config (`model.prompt`), so a new wording or a native-language version is a config change;
this module only assembles the chat message the model's own chat template then renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INPUTS = ("image", "image_caption", "caption")  # IMG, +CAPT, caption-only


@dataclass
class PromptSpec:
    definition: str
    questions: list[str]
    choose: str = "\nChoose:\n{first_letter}: {first}\n{second_letter}: {second}\n"
    hate: str = "Hate"
    non_hate: str = "Non-hate"
    meme_prefix: str = "\nMeme: "
    caption: str = "\nCaption inside the meme image: '{caption}'"
    letters: list[str] = field(default_factory=lambda: ["a", "b"])
    index: int = 0
    input: str = "image"
    country: str | None = None  # None, "language" (the meme language's country) or a country name
    country_template: str = "As a person raised up in {country}, "
    countries: dict[str, str] = field(default_factory=dict)  # language → country
    native: dict[str, dict[str, Any]] = field(default_factory=dict)  # language → overrides of the fields above

    def __post_init__(self) -> None:
        if self.input not in INPUTS:
            raise ValueError(f"prompt input must be one of {INPUTS}, got {self.input!r}")
        if not 0 <= self.index < 2 * len(self.questions):
            raise ValueError(f"prompt index {self.index} is outside 0..{2 * len(self.questions) - 1}")

    def for_language(self, lang: str) -> PromptSpec:
        """The native-language version (its own texts and letters) when the config gives one."""
        overrides = self.native.get(lang)
        if not overrides:
            return self
        fields = {**self.__dict__, **overrides, "native": {}}
        return PromptSpec(**fields)

    @property
    def hate_first(self) -> bool:
        return self.index % 2 == 0

    @property
    def hate_letter(self) -> str:
        return self.letters[0] if self.hate_first else self.letters[1]

    def options(self) -> str:
        first, second = (self.hate, self.non_hate) if self.hate_first else (self.non_hate, self.hate)
        return self.choose.format(first_letter=self.letters[0], first=first, second_letter=self.letters[1], second=second)

    def question(self, lang: str) -> str:
        text = self.questions[self.index // 2]
        country = self.countries.get(lang) if self.country == "language" else self.country
        if country:
            text = self.country_template.format(country=country) + text[0].lower() + text[1:]
        return text

    def message(self, text: str, lang: str) -> list[dict[str, Any]]:
        """One user turn: definition + question + "Meme: " [image] [caption] + options."""
        spec = self.for_language(lang)
        content: list[dict[str, Any]] = [{"type": "text", "text": spec.definition + spec.question(lang) + spec.meme_prefix}]
        if spec.input != "caption":
            content.append({"type": "image"})
        tail = spec.caption.format(caption=text) if spec.input != "image" else ""
        content.append({"type": "text", "text": tail + spec.options()})
        return [{"role": "user", "content": content}]


def prompt_corpus(spec: PromptSpec) -> list[str]:
    """Every fixed string of the prompts (to train a tiny tokenizer that knows them)."""
    texts = [spec.definition, *spec.questions, spec.choose, spec.hate, spec.non_hate, spec.meme_prefix, spec.caption, *spec.letters]
    for overrides in spec.native.values():
        texts += [str(v) for v in overrides.values()]
    return texts

"""The Multi3Hate zero-shot prompts as data: 3 questions × 2 option orders, caption, country and native variants.

The texts are the study's, verbatim, in the model config (`model.prompt`, the Multi3Hate study, docs/datasets.md); this module
only assembles the user turn the model's own chat template then renders, exactly as the study did:

    text 1 = definition + "\\n\\n" + question + meme prefix,   the image,   text 2 = [caption line] + option block

Prompt index = 2·question + order; which order lists Hate first is decided by `crossmod.evaluation.answers.option_order`
(the parser asks the same rule). Variants:
- `input`: `image` (IMG), `image_caption` (+CAPT: the caption line opens text 2), `caption` (no image; the
  text is otherwise unchanged, the study gives no separate wording for it).
- `country`: `language` puts the meme language's country (`countries`) into the question, the study's three
  different insertions (`country_questions`); `head` asks every meme once per label head, each time in that
  head's culture's country (`head_countries`: a verbalizer then answers for each culture in its own name);
  any other string is inserted for every meme.
- `native`: each meme gets its own language's prompt set (`native_sets`, the study's Figure 11) instead of the
  English one. A native set lists what differs from the English set (the `en` one only its caption line).
  The study gives the country questions in English only, so `native` with `country` is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crossmod.evaluation.answers import OptionSet, label_words, option_order, options_for_prompt

INPUTS = ("image", "image_caption", "caption")  # IMG, +CAPT, caption-only


@dataclass(frozen=True)
class PromptSet:
    """One language's prompt texts; `options[order]` is the option block, `labels` = (hate, non-hate) as it names them."""

    language: str
    definition: str
    questions: tuple[str, ...]
    caption: str
    options: tuple[str, str]
    meme_prefix: str
    letters: tuple[str, str]
    labels: tuple[str, str]

    @classmethod
    def from_config(cls, language: str, texts: Mapping[str, Any]) -> PromptSet:
        missing = {"definition", "questions", "caption", "options", "meme_prefix", "letters", "labels"} - set(texts)
        if missing:
            raise ValueError(f"prompt set {language!r} lacks {sorted(missing)} (model.prompt)")
        return cls(
            language=language,
            definition=str(texts["definition"]),
            questions=tuple(str(q) for q in texts["questions"]),
            caption=str(texts["caption"]),
            options=tuple(str(o) for o in texts["options"]),  # type: ignore[arg-type]
            meme_prefix=str(texts["meme_prefix"]),
            letters=tuple(str(x) for x in texts["letters"]),  # type: ignore[arg-type]
            labels=tuple(str(x) for x in texts["labels"]),  # type: ignore[arg-type]
        )

    def __post_init__(self) -> None:
        where = f"prompt set {self.language!r} (model.prompt)"
        if len(self.options) != 2 or len(self.letters) != 2 or len(self.labels) != 2 or len(set(self.letters)) != 2:
            raise ValueError(f"{where}: needs 2 option blocks, 2 distinct letters and 2 labels (hate, non-hate)")
        if self.caption.count("{caption}") != 1:
            raise ValueError(f"{where}: the caption line must hold '{{caption}}' once, got {self.caption!r}")
        for order, block in enumerate(self.options):
            hate = options_for_prompt(order, self.letters)
            non_hate = self.letters[1 - self.letters.index(hate)]
            for letter, label in ((hate, self.labels[0]), (non_hate, self.labels[1])):
                line = re.compile(rf"{re.escape(letter)}\s*[:：]\s*{re.escape(label)}")
                if not any(line.fullmatch(text) for text in block.split("\n")):
                    raise ValueError(
                        f"{where}: option block {order} {block!r} must list {letter!r} as {label!r} (order {order} puts "
                        f"{'Hate first' if order == 0 else 'Hate second'}, crossmod.evaluation.answers.option_order)"
                    )


@dataclass
class PromptSpec:
    english: dict[str, Any]
    country_questions: list[str]
    countries: dict[str, str] = field(default_factory=dict)  # meme language → country
    native_sets: dict[str, dict[str, Any]] = field(default_factory=dict)  # meme language → texts differing from English
    index: int = 0
    input: str = "image"
    country: str | None = None  # None, "language" (the meme language's country), "head" (each head's) or a country name
    native: bool = False
    head_countries: dict[str, str] = field(default_factory=dict)  # head → country, for country="head"

    def __post_init__(self) -> None:
        self.english = dict(self.english)
        self.country_questions = [str(q) for q in self.country_questions]
        self.countries = {str(k): str(v) for k, v in dict(self.countries).items()}
        self.head_countries = {str(k): str(v) for k, v in dict(self.head_countries).items()}
        self.native_sets = {str(lang): dict(texts or {}) for lang, texts in dict(self.native_sets).items()}
        self._sets: dict[str, PromptSet] = {}
        if not isinstance(self.native, bool):
            raise ValueError(f"model.prompt.native must be true or false (the texts live in model.prompt.native_sets), got {self.native!r}")
        if self.input not in INPUTS:
            raise ValueError(f"model.prompt.input must be one of {INPUTS}, got {self.input!r}")
        questions = len(self.prompt_set("en").questions)
        if not 0 <= self.index < 2 * questions:
            raise ValueError(f"model.prompt.index {self.index} is outside 0..{2 * questions - 1}")
        if len(self.country_questions) != questions or any(q.count("{country}") != 1 for q in self.country_questions):
            raise ValueError(f"model.prompt.country_questions must be {questions} questions, each with '{{country}}' once")
        if self.native and self.country:
            raise ValueError(
                "model.prompt.native=true with model.prompt.country: the study gives the country questions in English only; "
                "use the country questions with the English prompts (native=false)"
            )
        for lang in self.native_sets:
            self.prompt_set(lang, native=True)  # validate every set up front, not on the first meme of that language

    def prompt_set(self, lang: str, native: bool | None = None) -> PromptSet:
        """The texts for a meme in `lang`: its native set when `native`, else the English set."""
        native = self.native if native is None else native
        key = lang if native else "en"
        if native and lang not in self.native_sets:
            raise ValueError(f"no native prompt set for meme language {lang!r}; model.prompt.native_sets has {sorted(self.native_sets)}")
        if (key, native) not in self._sets:
            texts = {**self.english, **self.native_sets[lang]} if native else self.english
            self._sets[key, native] = PromptSet.from_config(key, texts)
        return self._sets[key, native]

    def countries_for_heads(self, heads: list[str]) -> list[str]:
        """With country="head": the country each head is asked in (one prompt per head and meme)."""
        missing = [head for head in heads if head not in self.head_countries]
        if missing:
            raise ValueError(
                f"model.prompt.country=head asks each head in its own country's name: no country for head(s) {missing} "
                f"in model.prompt.head_countries (has {sorted(self.head_countries)})"
            )
        return [self.head_countries[head] for head in heads]

    def country_for(self, lang: str) -> str | None:
        if self.country == "head":
            raise ValueError("model.prompt.country=head: the country comes with each head (question(lang, country))")
        if self.country != "language":
            return self.country
        if lang not in self.countries:
            raise ValueError(f"model.prompt.country=language: no country for meme language {lang!r} in model.prompt.countries")
        return self.countries[lang]

    def question(self, lang: str, country: str | None = None) -> str:
        """The question of this prompt for a meme in `lang`, naming `country` (default: as model.prompt.country says)."""
        number = self.index // 2
        country = country or self.country_for(lang)
        if country:
            return self.country_questions[number].replace("{country}", country)
        return self.prompt_set(lang).questions[number]

    def options(self, lang: str) -> OptionSet:
        """The letters of this prompt for `lang`, which one means Hate, and the label words the parser reads."""
        texts = self.prompt_set(lang)
        return OptionSet.for_prompt(self.index, texts.letters, words=label_words(texts.language))

    def message(self, text: str, lang: str, country: str | None = None) -> list[dict[str, Any]]:
        """One user turn: definition + "\\n\\n" + question + meme prefix, [image], [caption line] + option block."""
        texts = self.prompt_set(lang)
        question = self.question(lang, country)
        content: list[dict[str, Any]] = [{"type": "text", "text": texts.definition + "\n\n" + question + texts.meme_prefix}]
        if self.input != "caption":
            content.append({"type": "image"})
        caption = texts.caption.replace("{caption}", text) if self.input != "image" else ""
        content.append({"type": "text", "text": caption + texts.options[option_order(self.index)]})
        return [{"role": "user", "content": content}]


def prompt_corpus(spec: PromptSpec) -> list[str]:
    """Every fixed string of the prompts (to train a tiny tokenizer that knows them)."""
    texts: list[str] = [*spec.country_questions, *spec.countries.values()]
    sets = [spec.prompt_set("en", native=False), *(spec.prompt_set(lang, native=True) for lang in spec.native_sets)]
    for prompt in sets:
        texts += [
            prompt.definition,
            *prompt.questions,
            prompt.caption,
            *prompt.options,
            prompt.meme_prefix,
            *prompt.letters,
            *prompt.labels,
        ]
    return texts

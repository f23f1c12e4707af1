"""Read a zero-shot VLM's free-text answer to the Multi3Hate two-option question as 1 / 0 / None.

Protocol (the Multi3Hate study, docs/datasets.md): the prompt ends with "\\nChoose:\\na: Hate\\nb: Non-hate\\n" or the swapped
order; prompt index = 2·question + order and an even index means the first letter is Hate — the rule lives
here only (`option_order`), the prompt builder and the parser both ask it. Native-language prompts use their
own option labels ("Hass" / "Kein Hass", "Odio" / "Sin odio", "घृणा" / "गैर नफरत", "仇恨" / "非仇恨") and, in
Hindi, their own letters (क = first option, ख = second); `label_words(lang)` reads those words besides the
English ones (the study's relaxed keyword extraction, Appendix B.1). Generations are greedy, up to 40 tokens,
so an answer may be a bare letter, a letter with its label ("a: Hate"), a sentence ("The answer is b."),
or only the label words ("Non-hate speech."). Anything we cannot read unambiguously is ``None``: the study
counts such answers as wrong and reports how many there were.

Parsing order, and why:
1. An option letter, because the question asks for one. A letter only counts when it stands alone
   (so the "a" of "speech" or "cannot" never counts) *and* it is clearly used as an answer: it is followed
   by ")", "]", ":", ".", ",", ";", "-", a newline or the end of the text, or preceded by "(" / "[" / an
   answer cue ("answer:", "answer is", "option", "उत्तर:" …). This keeps the English article out:
   in "This is a hateful meme" the "a" is followed by a word and preceded by no cue.
2. Otherwise the label words, negated forms first ("non-hate", "not hate" …) and masked out, so the
   "hate" inside "non-hate" is not read as Hate.
3. ``None`` when signals disagree: two different letters ("a or b", "a: Hate\\nb: Non-hate"), a letter whose
   meaning contradicts the label word given with it ("a: Hate" when a is Non-hate), both label words and no
   letter ("hate or non-hate"), or a hedge/refusal with no letter ("I cannot determine …").
"yes"/"no" are deliberately not mapped: the prompts ask for a letter, so such answers are invalid.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import NamedTuple

DEFAULT_LETTERS: tuple[str, str] = ("a", "b")
HINDI_LETTERS: tuple[str, str] = ("क", "ख")


class LabelWords(NamedTuple):
    """Regex fragments (matched case-insensitively, as whole words) that name each label.

    ``non_hate`` is searched first and masked, because every English non-hate phrase contains "hate".
    """

    hate: tuple[str, ...] = (r"hate(?:ful)?",)
    non_hate: tuple[str, ...] = (
        r"non[\s\-_]*hate(?:ful)?",  # non-hate, non hate, nonhate, Non-Hate Speech, non-hateful
        r"not(?:\s+\w+){0,3}?\s*[\-_]?hate(?:ful)?",  # not hate, not a hate speech, does not contain any hate, nothate
        r"no\s+hate(?:ful)?",  # no hate speech
    )


ENGLISH_WORDS = LabelWords()

# The native prompt sets' option labels and question wordings, with the negations that contain the hate word
# (masked first, like the English "non-hate"). Chinese has no spaces, so its words match inside a sentence.
NATIVE_WORDS: dict[str, LabelWords] = {
    "de": LabelWords(
        hate=(r"hass(?:rede|erfüllt)?",),  # Hass, Hassrede, hasserfüllt
        non_hate=(
            r"nicht(?:\s+\w+){0,3}?[\s\-_]*hass(?:rede|erfüllt)?",
            r"kein(?:e|en)?[\s\-_]*hass(?:rede)?",
        ),  # Nicht-Hassrede, kein Hass
    ),
    "es": LabelWords(
        hate=(r"odio",),  # Odio, discurso de odio
        non_hate=(r"sin\s+odio", r"no(?:\s+\w+){0,4}?\s+odio"),  # Sin odio, discurso sin odio, no es un discurso de odio
    ),
    "hi": LabelWords(
        hate=(r"घृणा(?:स्पद)?", r"नफ\u093c?रत"),  # घृणा, घृणास्पद (भाषण), नफरत
        non_hate=(
            r"गैर[\s\-]*(?:घृणा(?:स्पद)?|नफ\u093c?रत)",  # गैर नफरत, गैर-घृणास्पद
            r"(?:घृणा(?:स्पद)?|नफ\u093c?रत)(?:\s+भाषण)?\s+नहीं",  # … घृणास्पद भाषण नहीं (है): "is not hate speech"
        ),
    ),
    "zh": LabelWords(
        hate=(r"仇恨",),  # 仇恨, 仇恨言论
        non_hate=(r"非仇恨", r"(?:不|没有|无)(?:是|属于|包含|含有|存在)?(?:任何)?仇恨"),  # 非仇恨, 不属于仇恨言论, 没有仇恨
    ),
}


def label_words(lang: str) -> LabelWords:
    """The words read as labels for a prompt in ``lang``: the English ones plus that language's own."""
    native = NATIVE_WORDS.get(lang)
    if native is None:
        return ENGLISH_WORDS
    return LabelWords(hate=ENGLISH_WORDS.hate + native.hate, non_hate=ENGLISH_WORDS.non_hate + native.non_hate)


# Words right before a letter that mark it as the chosen option ("Answer: a", "The answer is b", "Option (a)").
_CUE = re.compile(
    r"(?:\banswer(?:\s+is|\s+would\s+be)?|\boption|\bchoice(?:\s+is)?|\bantwort(?:\s+ist)?|\brespuesta(?:\s+es)?|\bopción"
    r"|उत्तर(?:\s+है)?|答案(?:是|为)?|选项?)\s*:?\s*$"
)
# What may follow a letter used as an answer ("a)", "a:", "a.", "a - Hate", "b\nbecause …", end of text).
_TERMINATORS = frozenset(")]}:.,;-–—\n।。、")
_OPENERS = ("(", "[", "{")
_QUOTES = "'\"“”‘’«»"
# Text between two different letters that makes the answer a non-choice ("a or b", "both a and b", "a/b").
_CONNECTORS = frozenset(
    {"", "or", "and", "nor", "/", ",", "&", "-", "vs", "vs.", "oder", "und", "o", "y", "या", "और", "और/या", "或", "和", "还是", "、", "，"}
)
# Hedges/refusals: a word-only answer containing these is not a decision ("I cannot determine if this is hate").
_HEDGE = re.compile(r"\b(?:cannot|can not|unable|not able|not sure|unsure|unclear|sorry|impossible|difficult to|hard to)\b")


def _is_wordish(char: str) -> bool:
    """Letters, digits and combining marks (Devanagari vowel signs/virama are marks, not letters).

    CJK ideographs are not: Chinese writes no spaces, so "答案是a" ends in a standalone letter."""
    if unicodedata.name(char, "").startswith("CJK UNIFIED IDEOGRAPH"):
        return False
    return char.isalnum() or unicodedata.category(char).startswith("M")


def _standalone(text: str, start: int, end: int) -> bool:
    return (start == 0 or not _is_wordish(text[start - 1])) and (end == len(text) or not _is_wordish(text[end]))


def _normalise(text: str) -> str:
    """Casefold, unify apostrophes, expand "n't", drop markdown emphasis, squeeze spaces, strip quotes."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("’", "'").replace("‘", "'")
    text = re.sub(r"\bcan't\b", "cannot", text)
    text = re.sub(r"\bwon't\b", "will not", text)
    text = re.sub(r"n't\b", " not", text)
    text = text.replace("*", "").replace("`", "")
    text = re.sub(r"[^\S\n]+", " ", text)
    return text.strip().strip(_QUOTES).strip()


def _letter_hits(text: str, letters: tuple[str, str]) -> list[tuple[int, int, str]]:
    """Every standalone occurrence (start, end, letter) of an option letter, in text order."""
    hits = []
    for letter in letters:
        for match in re.finditer(re.escape(letter), text):
            if _standalone(text, match.start(), match.end()):
                hits.append((match.start(), match.end(), letter))
    return sorted(hits)


def _used_as_answer(text: str, start: int, end: int) -> bool:
    before = text[:start].rstrip(" \t" + _QUOTES)
    if before.endswith(_OPENERS) or _CUE.search(before):
        return True
    after = text[end:].lstrip(" \t" + _QUOTES)
    return after == "" or after[0] in _TERMINATORS


def _chosen_letter(text: str, letters: tuple[str, str]) -> str | None:
    """The one letter answered, "" when none, None when the answer offers both letters."""
    hits = _letter_hits(text, letters)
    for (_, end, first), (start, _, second) in zip(hits, hits[1:]):
        between = text[end:start].strip(" \t()[]" + _QUOTES)
        if first != second and between in _CONNECTORS:
            return None  # "a or b", "Both a and b", "(a)/(b)"
    chosen = {letter for start, end, letter in hits if _used_as_answer(text, start, end)}
    if len(chosen) > 1:
        return None
    return chosen.pop() if chosen else ""


def _word_label(text: str, words: LabelWords) -> int | None | str:
    """1 / 0 from the label words, None when none is named, "both" when both are."""

    def find(patterns: tuple[str, ...], haystack: str) -> list[tuple[int, int]]:
        spans = []
        for pattern in patterns:
            for match in re.finditer(pattern, haystack):
                if match.end() > match.start() and _standalone(haystack, match.start(), match.end()):
                    spans.append(match.span())
        return spans

    non_hate = find(words.non_hate, text)
    masked = text
    for start, end in non_hate:
        masked = masked[:start] + " " * (end - start) + masked[end:]
    hate = find(words.hate, masked)
    if hate and non_hate:
        return "both"
    return 1 if hate else 0 if non_hate else None


def parse_answer(text: str, hate_option: str, options: tuple[str, str] = DEFAULT_LETTERS, words: LabelWords = ENGLISH_WORDS) -> int | None:
    """1 (hate), 0 (non-hate) or None (invalid) for one generation; ``hate_option`` is the letter meaning Hate."""
    letters = (options[0].casefold(), options[1].casefold())
    hate_letter = hate_option.casefold()
    if len(set(letters)) != 2 or hate_letter not in letters:
        raise ValueError(f"hate_option {hate_option!r} must be one of two distinct options {options!r}")
    text = _normalise(text)
    if not text:
        return None
    letter = _chosen_letter(text, letters)
    if letter is None:
        return None
    word = _word_label(text, words)
    if letter:
        value = int(letter == hate_letter)
        # A label word that definitely disagrees with the letter ("a: Hate" when a is Non-hate) is a contradiction;
        # mixed words ("b: Non-hate, although it mentions hate …") leave the letter in charge.
        return None if word in (0, 1) and word != value else value
    if word == "both" or word is None or _HEDGE.search(text):
        return None
    return word


def chosen_option(text: str, letters: tuple[str, ...]) -> str | None:
    """The one option letter (as given in ``letters``, any number of them) a free-text answer picks, by the
    letter rules above; None when it picks none or several ("A or B"). Label words are not read."""
    folded = tuple(letter.casefold() for letter in letters)
    if len(set(folded)) != len(folded):
        raise ValueError(f"option letters must be distinct, got {letters!r}")
    text = _normalise(text)
    letter = _chosen_letter(text, folded) if text else None  # type: ignore[arg-type]
    return letters[folded.index(letter)] if letter else None


def option_order(index: int) -> int:
    """The option order of prompt ``index`` (= 2·question + order): 0 lists Hate first, 1 lists it second."""
    if index < 0:
        raise ValueError(f"prompt index must be >= 0, got {index}")
    return index % 2


def options_for_prompt(index: int, letters: tuple[str, str] = DEFAULT_LETTERS) -> str:
    """The letter meaning Hate in prompt ``index``: the first letter for even indices (the study's rule)."""
    return letters[option_order(index)]


@dataclass(frozen=True)
class OptionSet:
    """The two option letters of one prompt, which of them means Hate, and the label words read; parses answers."""

    letters: tuple[str, str] = DEFAULT_LETTERS
    hate: str = "a"
    words: LabelWords = field(default=ENGLISH_WORDS)

    @classmethod
    def for_prompt(cls, index: int, letters: tuple[str, str] = DEFAULT_LETTERS, words: LabelWords = ENGLISH_WORDS) -> OptionSet:
        return cls(letters=letters, hate=options_for_prompt(index, letters), words=words)

    @property
    def non_hate(self) -> str:
        return self.letters[1] if self.hate == self.letters[0] else self.letters[0]

    def parse(self, text: str) -> int | None:
        return parse_answer(text, self.hate, self.letters, self.words)

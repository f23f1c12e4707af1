"""`parse_answer` on real-looking generations, in both option orders (hate = "a" or hate = "b"), English and native."""

from __future__ import annotations

import pytest

from crossmod.evaluation.answers import HINDI_LETTERS, OptionSet, label_words, option_order, options_for_prompt, parse_answer

# (generation, expected when hate is "a", expected when hate is "b")
CASES = [
    # bare letters, with the punctuation models add
    ("a", 1, 0),
    ("b", 0, 1),
    ("A", 1, 0),
    ("B", 0, 1),
    ("(b)", 0, 1),
    ("a)", 1, 0),
    ("a:", 1, 0),
    ("b.", 0, 1),
    ("[a]", 1, 0),
    ("Answer: a", 1, 0),
    ("answer: B", 0, 1),
    ("The answer is b.", 0, 1),
    ("The correct answer is (a)", 1, 0),
    ("Option b", 0, 1),
    ("**a**", 1, 0),
    ("Answer: **b**", 0, 1),
    ('"b"', 0, 1),
    ("'a'", 1, 0),
    ("  a\n", 1, 0),
    ("\n\nb\n", 0, 1),
    ("ａ", 1, 0),  # full-width letter
    # letter + label: consistent → the letter; contradicting the option order → invalid
    ("a: Hate", 1, None),
    ("a: Non-hate", None, 0),
    ("b: Non-hate", 0, None),
    ("b: Hate", None, 1),
    ("a) Hate speech", 1, None),
    ("b\nThe meme is not hateful.", 0, None),
    ("a. The meme attacks a group for its religion.", 1, 0),
    # label words only: independent of the option order
    ("Answer: Hate", 1, 1),
    ("Hate", 1, 1),
    ("hate", 1, 1),
    ("Hate speech", 1, 1),
    ("Hate Speech", 1, 1),
    ("Hateful", 1, 1),
    ("Non-hate", 0, 0),
    ("Non-hate speech.", 0, 0),
    ("Non-Hate Speech", 0, 0),
    ("non hate", 0, 0),
    ("nonhate", 0, 0),
    ("Not hate speech", 0, 0),
    ("This meme is not a hate speech.", 0, 0),
    ("This meme doesn't contain hate speech.", 0, 0),
    ("This is a hateful meme", 1, 1),
    # invalid
    ("I cannot determine", None, None),
    ("I cannot determine whether this meme is hate speech.", None, None),
    ("I'm sorry, I can't help with that.", None, None),
    ("", None, None),
    ("   \n", None, None),
    ("a or b", None, None),
    ("Both a and b", None, None),
    ("a/b", None, None),
    ("a: Hate\nb: Non-hate", None, None),
    ("Hate or non-hate", None, None),
    ("It could be hate or it could be non-hate.", None, None),
    ("c", None, None),
    ("c)", None, None),
    ("This is a meme.", None, None),
    ("Yes", None, None),
]


@pytest.mark.parametrize(("text", "if_a_hate", "if_b_hate"), CASES, ids=[repr(c[0]) for c in CASES])
def test_both_option_orders(text, if_a_hate, if_b_hate):
    assert parse_answer(text, hate_option="a") == if_a_hate
    assert parse_answer(text, hate_option="b") == if_b_hate


HINDI = [
    ("क", 1, 0),
    ("ख", 0, 1),
    ("उत्तर: क", 1, 0),
    ("उत्तर: ख", 0, 1),
    ("(ख)", 0, 1),
    ("क या ख", None, None),  # "क or ख"
    ("कारण", None, None),  # क followed by a vowel sign is part of a word, not the option
    ("a", None, None),  # a Latin letter is not an option of the Hindi prompt
    ("Hate", 1, 1),  # English label words still read
]


@pytest.mark.parametrize(("text", "if_first_hate", "if_second_hate"), HINDI, ids=[repr(c[0]) for c in HINDI])
def test_hindi_letters(text, if_first_hate, if_second_hate):
    assert parse_answer(text, hate_option="क", options=HINDI_LETTERS) == if_first_hate
    assert parse_answer(text, hate_option="ख", options=HINDI_LETTERS) == if_second_hate


@pytest.mark.parametrize(
    "text",
    ["This is a hateful meme", "A hateful meme.", "This is a meme that promotes hate", "It is a clear case of hate speech"],
)
def test_english_article_is_not_option_a(text):
    # Read as option a, hate_option="b" would give 0 (a = Non-hate); the article must be ignored and the word used.
    assert parse_answer(text, hate_option="b") == 1
    assert parse_answer(text, hate_option="a") == 1


def test_letter_a_inside_words_does_not_count():
    for text in ["speech", "cannot", "abstain", "That is a tough call"]:
        assert parse_answer(text, hate_option="a") is None


def test_hate_option_must_be_an_option():
    with pytest.raises(ValueError):
        parse_answer("a", hate_option="c")
    with pytest.raises(ValueError):
        parse_answer("a", hate_option="a", options=("a", "a"))


def test_prompt_index_sets_the_hate_letter():
    assert [option_order(i) for i in range(6)] == [0, 1, 0, 1, 0, 1]
    assert [options_for_prompt(i) for i in range(6)] == ["a", "b", "a", "b", "a", "b"]
    assert options_for_prompt(3, HINDI_LETTERS) == "ख"
    with pytest.raises(ValueError):
        options_for_prompt(-1)


def test_option_set_parses_in_the_prompt_order():
    even, odd = OptionSet.for_prompt(0), OptionSet.for_prompt(5)
    assert (even.hate, even.non_hate, odd.hate, odd.non_hate) == ("a", "b", "b", "a")
    assert (even.parse("a"), odd.parse("a"), odd.parse("The answer is b.")) == (1, 0, 1)
    hindi = OptionSet.for_prompt(1, HINDI_LETTERS, label_words("hi"))
    assert (hindi.hate, hindi.parse("ख"), hindi.parse("ख: घृणा"), hindi.parse("क: गैर नफरत")) == ("ख", 1, 1, 0)


# Native answers: (language, generation, expected when the first option is Hate, expected when the second is).
# The option blocks are the study's (the Multi3Hate study, docs/datasets.md): de "a: Hass / b: Kein Hass", es "a: Odio / b: Sin odio",
# hi "क: घृणा / ख: गैर नफरत", zh "a：仇恨 / b：非仇恨" (full-width colons), swapped in odd prompts.
NATIVE = [
    # the option labels alone, and with their letter
    ("de", "Hass", 1, 1),
    ("de", "Kein Hass", 0, 0),
    ("de", "a: Hass", 1, None),
    ("de", "b: Kein Hass", 0, None),
    ("de", "a: Kein Hass", None, 0),
    ("de", "b: Hass", None, 1),
    ("de", "Hassrede", 1, 1),  # the question's words
    ("de", "Nicht-Hassrede", 0, 0),
    ("de", "Das ist keine Hassrede.", 0, 0),
    ("de", "Es handelt sich nicht um Hassrede.", 0, 0),
    ("de", "Antwort: b", 0, 1),
    ("de", "a oder b", None, None),
    ("de", "Hass oder kein Hass", None, None),
    ("es", "Odio", 1, 1),
    ("es", "Sin odio", 0, 0),
    ("es", "a: Odio", 1, None),
    ("es", "b: Sin odio", 0, None),
    ("es", "Discurso de odio", 1, 1),
    ("es", "Discurso sin odio", 0, 0),
    ("es", "No es un discurso de odio.", 0, 0),
    ("es", "Respuesta: a", 1, 0),
    ("es", "a o b", None, None),
    ("hi", "क", 1, 0),
    ("hi", "ख", 0, 1),
    ("hi", "घृणा", 1, 1),
    ("hi", "गैर नफरत", 0, 0),
    ("hi", "क: घृणा", 1, None),
    ("hi", "ख: गैर नफरत", 0, None),
    ("hi", "क: गैर नफरत", None, 0),
    ("hi", "घृणास्पद भाषण", 1, 1),
    ("hi", "गैर-घृणास्पद भाषण", 0, 0),
    ("hi", "यह घृणास्पद भाषण नहीं है।", 0, 0),  # "this is not hate speech"
    ("hi", "उत्तर: ख", 0, 1),
    ("hi", "क: घृणा\nख: गैर नफरत", None, None),  # the option block echoed
    ("zh", "仇恨", 1, 1),
    ("zh", "非仇恨", 0, 0),
    ("zh", "a：仇恨", 1, None),  # full-width colon, as in the prompt
    ("zh", "b：非仇恨", 0, None),
    ("zh", "a：非仇恨", None, 0),
    ("zh", "答案是b", 0, 1),
    ("zh", "b。", 0, 1),
    ("zh", "该表情包属于仇恨言论", 1, 1),
    ("zh", "该表情包不属于仇恨言论", 0, 0),
    ("zh", "没有仇恨", 0, 0),
    ("zh", "a或b", None, None),
    ("zh", "仇恨还是非仇恨", None, None),
    ("zh", "这是一个表情包", None, None),  # nonsensical: wrong
]


@pytest.mark.parametrize(("lang", "text", "if_first_hate", "if_second_hate"), NATIVE, ids=[f"{c[0]}:{c[1]!r}" for c in NATIVE])
def test_native_labels_and_letters(lang, text, if_first_hate, if_second_hate):
    letters = HINDI_LETTERS if lang == "hi" else ("a", "b")
    words = label_words(lang)
    assert parse_answer(text, hate_option=letters[0], options=letters, words=words) == if_first_hate
    assert parse_answer(text, hate_option=letters[1], options=letters, words=words) == if_second_hate


def test_native_words_need_the_native_prompt():
    # Under the English prompt "Kein Hass" names no English label: invalid, not guessed.
    assert parse_answer("Kein Hass", hate_option="a") is None
    assert parse_answer("Kein Hass", hate_option="a", words=label_words("de")) == 0
    assert label_words("en") == label_words("xx")  # languages without a native set read the English words

"""`parse_answer` on real-looking generations, in both option orders (hate = "a" or hate = "b")."""

from __future__ import annotations

import pytest

from evaluation.answers import HINDI_LETTERS, OptionSet, options_for_prompt, parse_answer

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
    assert [options_for_prompt(i) for i in range(6)] == ["a", "b", "a", "b", "a", "b"]
    assert options_for_prompt(3, HINDI_LETTERS) == "ख"
    with pytest.raises(ValueError):
        options_for_prompt(-1)


def test_option_set_renders_and_parses_the_prompt_choices():
    even, odd = OptionSet.for_prompt(0), OptionSet.for_prompt(5)
    assert even.choices() == "\nChoose:\na: Hate\nb: Non-hate\n"
    assert odd.choices() == "\nChoose:\na: Non-hate\nb: Hate\n"
    assert (even.parse("a"), odd.parse("a"), odd.parse("The answer is b.")) == (1, 0, 1)
    hindi = OptionSet.for_prompt(1, HINDI_LETTERS)
    assert hindi.choices("नफरत", "गैर-नफरत", "चुनें:") == "\nचुनें:\nक: गैर-नफरत\nख: नफरत\n"
    assert hindi.parse("ख") == 1

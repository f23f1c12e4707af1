"""The rendered Multi3Hate zero-shot prompts against the study's strings, written out from the Multi3Hate study (docs/datasets.md).

Every one of 6 prompts × 5 meme languages × {IMG, +CAPT} × {plain, country} with the English prompts, and
6 × 5 × {IMG, +CAPT} with the native prompt sets, is rendered from the shipped config (configs/model/vlm.yaml)
and compared with the study's layout: text 1 = definition + "\n\n" + question + meme prefix, the image,
text 2 = [caption line] + option block (order 0 = Hate first for even prompt indices).
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import pytest
from omegaconf import OmegaConf

from crossmod.models.vlm.prompts import PromptSpec, prompt_corpus
from tests.conftest import ROOT


class Texts(NamedTuple):
    definition: str
    questions: tuple[str, str, str]
    caption: str
    options: tuple[str, str]  # order 0 (Hate first), order 1
    meme_prefix: str


ENGLISH = Texts(
    definition="Definition of Hate Speech:\n\nAny kind of communication [...], that attacks or uses pejorative or discriminatory language with reference to a person or a group on the basis of who they are, in other words, based on their religion, ethnicity, nationality, race, colour, descent, gender or other identity factor.",
    questions=(
        "Answer if this meme is hate or not with a single alphabet letter among given answer choices a and b.",
        "Given a meme from online, answer if it is 'Hate Speech' or 'Non-Hate Speech'. Answer with only one single alphabet between 'a' and 'b', with no other description.",
        "Would you consider this meme as a hate speech? Give an answer in a single alphabet only.",
    ),
    caption="\nCaption inside the meme: '{caption}'",  # the English runs' caption line
    options=("\nChoose:\na: Hate\nb: Non-hate\n", "\nChoose:\na: Non-hate\nb: Hate\n"),
    meme_prefix="\nMeme: ",
)
COUNTRY_QUESTIONS = (
    "Answer if this meme is hate or not in {country} with a single alphabet letter among given answer choices a and b.",
    "Given a meme from online, answer if it is 'Hate Speech' or 'Non-Hate Speech' in {country}. Answer with only one single alphabet between 'a' and 'b', with no other description.",
    "As a person raised up in {country}, would you consider this meme as a hate speech? Give an answer in a single alphabet only.",
)
COUNTRIES = {"en": "the United States", "de": "Germany", "es": "Mexico", "hi": "India", "zh": "China"}
NATIVE = {
    "en": ENGLISH._replace(caption="\nCaption inside the meme image: '{caption}'"),  # the native-prompt file's spelling
    "de": Texts(
        definition="Definition von Hassrede:\n\nJede Art von Kommunikation [...], die eine abwertende oder diskriminierende Sprache in Bezug auf eine Person oder eine Gruppe aufgrund ihrer Identität angreift oder verwendet, mit anderen Worten aufgrund ihrer Religion, ethnischen Zugehörigkeit, Nationalität, Rasse, Hautfarbe, Abstammung, Geschlecht oder ein anderer Identitätsfaktor.",
        questions=(
            "Beantworte, ob dieses Meme Hass oder nicht ist, mit einem einzelnen Buchstaben der vorgegebenen Antwortmöglichkeiten a und b.",
            "Anhand eines Memes aus dem Internet, beantworte ob es sich um eine „Hassrede“ oder eine „Nicht-Hassrede“ handelt. Antworten Sie mit nur einem Buchstaben zwischen „a“ und „b“ und ohne weitere Beschreibung.",
            "Würdest du dieses Meme als Hassrede betrachten? Gebe deine Antwort nur in einem Buchstaben an.",
        ),
        caption="\nBeschriftung im Meme-Bild: '{caption}'",
        options=("\nWähle:\na: Hass\nb: Kein Hass\n", "\nWähle:\na: Kein Hass\nb: Hass\n"),
        meme_prefix="\nMeme: ",
    ),
    "es": Texts(
        definition="Definición de discurso de odio:\n\nCualquier tipo de comunicación [...], que ataque o utilice un lenguaje peyorativo o discriminatorio con referencia a una persona o un grupo en función de quiénes son, en otras palabras, en función de su religión, etnia, nacionalidad, raza, color, ascendencia, género u otro factor de identidad.",
        questions=(
            "Responda si este meme es odio o no con una sola letra del alfabeto entre las opciones de respuesta a y b.",
            "Dado un meme de Internet, responda si es un 'discurso de odio' o 'discurso sin odio'. Responda con una sola letra entre 'a' y 'b', sin ninguna otra descripción.",
            "¿Considerarías este meme como un discurso de odio? Responde con una sola letra del alfabeto.",
        ),
        caption="\nTítulo dentro de la imagen del meme: '{caption}'",
        options=("\nElige:\na: Odio\nb: Sin odio\n", "\nElige:\na: Sin odio\nb: Odio\n"),
        meme_prefix="\nMeme: ",
    ),
    "hi": Texts(
        definition="घृणास्पद भाषण की परिभाषा:\n\nकिसी भी प्रकार का संचार [...], जो किसी व्यक्ति या समूह के संदर्भ में उनके धर्म, जातीयता, राष्ट्रीयता, नस्ल, रंग, वंश, लिंग या अन्य पहचान कारक के आधार पर अपमानजनक या भेदभावपूर्ण भाषा का उपयोग करता है।",
        questions=(
            "दिए गए उत्तर विकल्पों क और ख में से किसी एक अक्षर से बताइए कि यह मीम घृणास्पद भाषण है या नहीं।",
            "ऑनलाइन से दिए गए किसी मेमे से, उत्तर दें कि यह 'घृणास्पद भाषण' है या 'गैर-घृणास्पद भाषण' है। 'क' और 'ख' के बीच केवल एक ही अक्षर से उत्तर दें, कोई अन्य विवरण न दें।",
            "क्या आप इस मीम को  'घृणास्पद भाषण' मानेंगे? इसका जवाब सिर्फ़ एक अक्षर में दीजिए।",
        ),
        caption="\nमीम इमेज के अंदर कैप्शन: '{caption}'",
        options=("\nचुनें:\nक: घृणा\nख: गैर नफरत\n", "\nचुनें:\nक: गैर नफरत\nख: घृणा\n"),
        meme_prefix="\nमीम: ",
    ),
    "zh": Texts(
        definition="仇恨言论的定义:\n\n在任何形式的交流中 [...]，基于个人或群体的身份进行攻击或使用贬义或歧视性语言。换句话说，基于他们的宗教、民族、国籍、种族、肤色、血统、性别或其他身份因素，进行攻击或使用贬义或歧视性语言。",
        questions=(
            "请判断该表情包是否包含仇恨，根据选项用字母a或b作答",
            "根据网图判断其是否为仇恨言论。用字母a或b作答，请勿在答案中输入其他文本",
            "您是否认为该表情包属于仇恨言论？请用单个字母给出答案",
        ),
        caption="\n表情包所配文字：'{caption}'",
        options=("\n请选择：\na：仇恨\nb：非仇恨", "\n请选择：\na：非仇恨\nb：仇恨\n"),
        meme_prefix="\n表情包: ",
    ),
}
LANGUAGES = ("en", "de", "es", "hi", "zh")
CAPTION = "Germany! <sep> always fun to watch"


@cache
def shipped_prompt() -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "vlm.yaml").prompt)


def spec(**overrides: Any) -> PromptSpec:
    return PromptSpec(**{**shipped_prompt(), **overrides})


def rendered(spec: PromptSpec, lang: str) -> tuple[str, str]:
    """The two text parts of the one user turn, checking the image sits between them."""
    (turn,) = spec.message(CAPTION, lang)
    assert turn["role"] == "user"
    assert [part["type"] for part in turn["content"]] == ["text", "image", "text"]
    return turn["content"][0]["text"], turn["content"][2]["text"]


def expected(texts: Texts, question: str, index: int, with_caption: bool) -> tuple[str, str]:
    caption = texts.caption.replace("{caption}", CAPTION) if with_caption else ""
    return texts.definition + "\n\n" + question + texts.meme_prefix, caption + texts.options[index % 2]


@pytest.mark.parametrize("country", [None, "language"])
@pytest.mark.parametrize("input", ["image", "image_caption"])
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("index", range(6))
def test_english_prompts(index, lang, input, country):
    question = COUNTRY_QUESTIONS[index // 2].replace("{country}", COUNTRIES[lang]) if country else ENGLISH.questions[index // 2]
    assert rendered(spec(index=index, input=input, country=country), lang) == expected(ENGLISH, question, index, input == "image_caption")


@pytest.mark.parametrize("input", ["image", "image_caption"])
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("index", range(6))
def test_native_prompts(index, lang, input):
    texts = NATIVE[lang]
    assert rendered(spec(index=index, input=input, native=True), lang) == expected(
        texts, texts.questions[index // 2], index, input == "image_caption"
    )


def test_whole_messages_written_out():
    """A few complete prompts, character for character, including the published quirks."""
    assert rendered(spec(index=5, input="image_caption", country="language"), "de") == (
        "Definition of Hate Speech:\n\nAny kind of communication [...], that attacks or uses pejorative or discriminatory language with reference to a person or a group on the basis of who they are, in other words, based on their religion, ethnicity, nationality, race, colour, descent, gender or other identity factor.\n\n"
        "As a person raised up in Germany, would you consider this meme as a hate speech? Give an answer in a single alphabet only.\nMeme: ",
        "\nCaption inside the meme: 'Germany! <sep> always fun to watch'\nChoose:\na: Non-hate\nb: Hate\n",
    )
    assert rendered(spec(index=2, country="language"), "zh")[0].endswith(
        "\n\nGiven a meme from online, answer if it is 'Hate Speech' or 'Non-Hate Speech' in China. Answer with only one single alphabet between 'a' and 'b', with no other description.\nMeme: "
    )
    assert rendered(spec(index=0, country="language"), "es")[0].endswith(
        "\n\nAnswer if this meme is hate or not in Mexico with a single alphabet letter among given answer choices a and b.\nMeme: "
    )
    assert rendered(spec(index=0, input="image_caption", native=True), "zh") == (
        "仇恨言论的定义:\n\n在任何形式的交流中 [...]，基于个人或群体的身份进行攻击或使用贬义或歧视性语言。换句话说，基于他们的宗教、民族、国籍、种族、肤色、血统、性别或其他身份因素，进行攻击或使用贬义或歧视性语言。\n\n"
        "请判断该表情包是否包含仇恨，根据选项用字母a或b作答\n表情包: ",
        "\n表情包所配文字：'Germany! <sep> always fun to watch'\n请选择：\na：仇恨\nb：非仇恨",  # no final newline, as published
    )
    assert rendered(spec(index=5, native=True), "hi") == (
        "घृणास्पद भाषण की परिभाषा:\n\nकिसी भी प्रकार का संचार [...], जो किसी व्यक्ति या समूह के संदर्भ में उनके धर्म, जातीयता, राष्ट्रीयता, नस्ल, रंग, वंश, लिंग या अन्य पहचान कारक के आधार पर अपमानजनक या भेदभावपूर्ण भाषा का उपयोग करता है।\n\n"
        "क्या आप इस मीम को  'घृणास्पद भाषण' मानेंगे? इसका जवाब सिर्फ़ एक अक्षर में दीजिए।\nमीम: ",  # two spaces after को
        "\nचुनें:\nक: गैर नफरत\nख: घृणा\n",
    )


def test_caption_only_drops_the_image_and_keeps_the_text():
    with_image = rendered(spec(index=3, input="image_caption"), "en")
    (turn,) = spec(index=3, input="caption").message(CAPTION, "en")
    assert [part["type"] for part in turn["content"]] == ["text", "text"]
    assert (turn["content"][0]["text"], turn["content"][1]["text"]) == with_image


@pytest.mark.parametrize(
    ("lang", "native", "index", "letters", "hate"),
    [
        ("en", False, 0, ("a", "b"), "a"),
        ("hi", False, 1, ("a", "b"), "b"),  # English prompts on a Hindi meme: Latin letters
        ("hi", True, 0, ("क", "ख"), "क"),
        ("hi", True, 3, ("क", "ख"), "ख"),
        ("zh", True, 5, ("a", "b"), "b"),
    ],
)
def test_option_letters_follow_the_prompt(lang, native, index, letters, hate):
    options = spec(index=index, native=native).options(lang)
    assert (options.letters, options.hate) == (letters, hate)


def test_native_answers_are_read_with_the_native_prompt():
    assert spec(index=1, native=True).options("de").parse("Kein Hass") == 0  # b = Hass, a = Kein Hass
    assert spec(index=1, native=True).options("de").parse("a: Kein Hass") == 0
    assert spec(index=0, native=True).options("zh").parse("a：仇恨") == 1
    assert spec(index=0, native=True).options("hi").parse("ख: गैर नफरत") == 0
    assert spec(index=0, native=False).options("de").parse("Kein Hass") is None  # asked in English


def test_native_with_country_is_an_error():
    with pytest.raises(ValueError, match="country questions in English only"):
        spec(native=True, country="language")


def test_bad_prompt_configs_are_named():
    with pytest.raises(ValueError, match="no native prompt set for meme language 'fr'"):
        spec(native=True).message("x", "fr")
    with pytest.raises(ValueError, match="no country for meme language 'fr'"):
        spec(country="language").message("x", "fr")
    with pytest.raises(ValueError, match="index 6 is outside 0..5"):
        spec(index=6)
    with pytest.raises(ValueError, match="model.prompt.native must be true or false"):
        spec(native={"hi": {"letters": ["क", "ख"]}})
    with pytest.raises(ValueError, match="model.prompt.input"):
        spec(input="video")
    swapped = dict(shipped_prompt()["native_sets"])
    swapped["de"] = {**swapped["de"], "options": list(reversed(swapped["de"]["options"]))}
    with pytest.raises(ValueError, match="prompt set 'de'.*must list 'a' as 'Hass'"):
        spec(native_sets=swapped)


def test_the_tiny_tokenizer_corpus_holds_every_prompt_text():
    corpus = set(prompt_corpus(spec()))
    for texts in (ENGLISH, *NATIVE.values()):
        assert {texts.definition, *texts.questions, texts.caption, *texts.options, texts.meme_prefix} <= corpus
    assert set(COUNTRY_QUESTIONS) <= corpus and {"क", "ख"} <= corpus


def test_native_prompt_through_the_chat_template_and_verbalizer(tmp_path):
    """A Hindi meme under native prompt 3: the chat holds the Hindi texts, the verbalizer scores ख (Hate) against क."""
    from crossmod.runtime.resolvers import tiny_vlm
    from tests.models.test_vlm import build

    tiny = tiny_vlm(str(tmp_path / "tiny"), "qwen2_vl")
    model = build(tmp_path, f"model.name_or_path={tiny}", "model.prompt.native=true", "model.prompt.index=3", "model.fusion.lora=null")
    features = model.preprocessor({"id": "x", "text": CAPTION, "image": None, "labels": {}, "lang": "hi"})
    part1, part2 = expected(NATIVE["hi"], NATIVE["hi"].questions[1], 3, with_caption=False)
    assert part1 + "<|vision_start|><|image_pad|><|vision_end|>" + part2 + "<|im_end|>\n<|im_start|>assistant\n" in features["chats"][0]
    tokenizer = model.preprocessor.processor.tokenizer
    assert [tokenizer.decode([i]) for i in features["options"]] == ["ख", "क"]

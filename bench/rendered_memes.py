"""Memes with known captions in five languages and three scripts, drawn the way the synthetic generator
draws them (`crossmod.data.synthetic.render_meme`: a scene, white top and bottom text outlined in black),
at the size real memes come in (512 px) with a font for each script. Used by bench/ocr.py (character
error rates) and the OCR tests.

Fonts come from PyPI packages in crossmod's dev extras, so every checkout renders the same pixels:
DejaVu Sans Bold (matplotlib's copy) for Latin, Noto Sans CJK SC (`mplfonts`) for Han, Shobhika Bold
(`devanagari-fonts`) for Devanagari.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import numpy as np
from PIL import ImageFont

from crossmod.data.synthetic import random_scene, render_meme

LANGS = ("en", "de", "es", "hi", "zh")
SCRIPT = {"en": "Latin", "de": "Latin", "es": "Latin", "hi": "Devanagari", "zh": "Han"}
FONTS = {  # script → (package, file inside it, how to install)
    "Latin": ("matplotlib", "mpl-data/fonts/ttf/DejaVuSans-Bold.ttf", "pip install matplotlib"),
    "Han": ("mplfonts", "fonts/NotoSansCJKsc-Regular.otf", "pip install mplfonts"),
    "Devanagari": ("devanagari_fonts", "fonts/Shobhika-1.05/Shobhika-Bold.otf", "pip install devanagari-fonts"),
}
# Parallel meme captions, "top | bottom"; the same sentence in every language at each index.
CAPTIONS: dict[str, list[str]] = {
    "en": [
        "when the pigeons | show up again",
        "nobody asked | but the landlords did",
        "me on monday | pretending to work",
        "cyclists be like | the road is mine",
        "typical tourists | nothing new",
        "one does not simply | leave the group chat",
        "my face when | the wifi is down",
        "they said it was easy | they lied",
        "robots taking over | one meme at a time",
        "clowns everywhere | and nobody laughs",
        "coffee first | questions later",
        "this is fine | everything is fine",
    ],
    "de": [
        "wenn die Tauben | wieder auftauchen",
        "niemand hat gefragt | aber die Vermieter schon",
        "ich am Montag | tue so als ob ich arbeite",
        "Radfahrer so | die Straße gehört mir",
        "typisch Touristen | nichts Neues",
        "man verlässt nicht einfach | den Gruppenchat",
        "mein Gesicht wenn | das WLAN ausfällt",
        "sie sagten es sei leicht | sie logen",
        "Roboter übernehmen | ein Meme nach dem anderen",
        "überall Clowns | und keiner lacht",
        "erst Kaffee | dann Fragen",
        "alles gut | wirklich alles gut",
    ],
    "es": [
        "cuando las palomas | aparecen otra vez",
        "nadie preguntó | pero los caseros sí",
        "yo el lunes | fingiendo trabajar",
        "los ciclistas | la calle es mía",
        "típico de turistas | nada nuevo",
        "uno no simplemente | sale del chat grupal",
        "mi cara cuando | se cae el wifi",
        "dijeron que era fácil | mintieron",
        "los robots toman el control | meme a meme",
        "payasos por todas partes | y nadie se ríe",
        "primero café | luego preguntas",
        "todo bien | de verdad todo bien",
    ],
    "hi": [
        "जब कबूतर | फिर से आ जाते हैं",
        "किसी ने नहीं पूछा | पर मकान मालिकों ने पूछा",
        "सोमवार को मैं | काम करने का नाटक करते हुए",
        "साइकिल वाले | सड़क मेरी है",
        "आम पर्यटक | कुछ नया नहीं",
        "कोई यूँ ही | ग्रुप चैट नहीं छोड़ता",
        "मेरा चेहरा जब | वाईफाई बंद हो",
        "उन्होंने कहा आसान है | उन्होंने झूठ बोला",
        "रोबोट कब्ज़ा कर रहे हैं | एक मीम एक बार में",
        "हर जगह जोकर | और कोई नहीं हँसता",
        "पहले कॉफ़ी | फिर सवाल",
        "सब ठीक है | सच में सब ठीक है",
    ],
    "zh": [
        "当鸽子 | 又出现的时候",
        "没人问 | 但房东问了",
        "周一的我 | 假装在工作",
        "骑车的人 | 这条路是我的",
        "典型的游客 | 没什么新鲜的",
        "没有人能轻易 | 退出群聊",
        "网断了的时候 | 我的表情",
        "他们说很简单 | 他们骗人",
        "机器人接管世界 | 一次一个表情包",
        "到处都是小丑 | 却没人笑",
        "先喝咖啡 | 再问问题",
        "没事 | 一切都很好",
    ],
}


class FontMissing(FileNotFoundError):
    """The font a script is drawn with is not installed; the message says how to install it."""


@cache
def font_file(script: str) -> Path:
    package, inside, install = FONTS[script]
    spec = importlib.util.find_spec(package)
    path = Path(spec.origin).parent / inside if spec and spec.origin else None
    if path is None or not path.is_file():
        raise FontMissing(f"no font for {script} captions ({package}/{inside}): {install} (in crossmod's dev extras)")
    return path


def draw_caption(rng: np.random.Generator, lang: str) -> tuple[list[int], str]:
    """One to four of the language's captions joined into one text (a spread of lengths, as memes have):
    which ones, and the text with each caption's line break made a space."""
    picks = [int(k) for k in rng.choice(len(CAPTIONS[lang]), size=int(rng.integers(1, 5)), replace=False)]
    return picks, " ".join(CAPTIONS[lang][k].replace(" | ", " ") for k in picks)


def expected_text(caption: str) -> str:
    """The caption as OCR should return it: top line, line break, bottom line."""
    return "\n".join(part.strip() for part in caption.split("|"))


def render(lang: str, index: int, seed: int, size: int = 512) -> tuple[bytes, str]:
    """Caption `index` of `lang` on a scene drawn from `seed`, with a font size and outline drawn from it
    too (meme text: 1/16 to 1/10 of the image, smaller where a line would not fit; outline 2–4 px at 512); returns (JPEG bytes, expected text)."""
    rng = np.random.default_rng([seed, index, LANGS.index(lang)])
    scene = random_scene(rng, int(rng.integers(6)))
    caption = CAPTIONS[lang][index]
    points = int(size / rng.uniform(10, 16))
    font = ImageFont.truetype(str(font_file(SCRIPT[lang])), points)
    while max(font.getlength(line.strip()) for line in caption.split("|")) > 0.94 * size:  # long lines get smaller type, as meme makers do
        points -= 1
        font = ImageFont.truetype(str(font_file(SCRIPT[lang])), points)
    stroke = max(1, round(size * rng.uniform(2, 4) / 512))
    return render_meme(scene, caption, size, font, stroke_width=stroke, margin=size // 40), expected_text(caption)

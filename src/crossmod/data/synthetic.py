"""The embedded synthetic memes: a deterministic, fully known multi-culture hate task.

Each meme pairs a drawn scene (one *image concept*: a coloured shape among grey distractors) with a
caption naming a *subject* (the text concept), given as `text`. The picture carries top/bottom meme text
too: by default the caption's template with a neutral word in the subject's place, so the pixels say
nothing about the subject and the image-only ceiling is true for any model, however well it reads
(`image_text=caption` draws the caption itself, for OCR: then the image shows everything). The hidden
rule, per culture:

* base: a meme is hateful when its subject is paired with "its" image concept (subject k with
  concept k): neither the caption nor the picture alone says anything;
* each culture adds `extra` hateful (concept, subject) pairs and `exempt`s some base pairs, so
  cultures disagree on a known share of memes;
* every group holds an original meme and two benign confounders (the same caption over another
  picture, the same picture under another caption), each in every language; annotator noise
  flips a label with probability `label_noise`.

Because the label is a function of the (concept, subject) pair, the best reachable score of each
model family is measurable on the generated data itself: `oracle_scores` computes it, the manifest
stores it, and `python -m crossmod.data.synthetic` prints it.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from crossmod.data.sample import Sample

GENERATOR_VERSION = 4  # 4: meta.tags

IMAGE_CONCEPTS: list[tuple[str, tuple[int, int, int]]] = [
    ("circle", (215, 35, 35)),
    ("square", (35, 75, 215)),
    ("triangle", (30, 160, 50)),
    ("diamond", (145, 50, 185)),
    ("cross", (240, 140, 10)),
    ("ring", (10, 165, 175)),
]
# What each concept looks like, as a meme's tag names it (meta.tags: the tag generator's target).
CONCEPT_TAGS = ["red circle", "blue square", "green triangle", "purple diamond", "orange cross", "teal ring"]
SUBJECTS: dict[str, list[str]] = {
    "en": ["pigeons", "landlords", "cyclists", "tourists", "robots", "clowns"],
    "de": ["Tauben", "Vermieter", "Radfahrer", "Touristen", "Roboter", "Clowns"],
    "es": ["palomas", "caseros", "ciclistas", "turistas", "robots", "payasos"],
}
# What the picture's meme text says in the subject's place (image_text=template): a word no culture's rule
# names, the same for every meme of a language, so the drawn text is independent of the label.
NEUTRAL_SUBJECT: dict[str, str] = {"en": "people", "de": "Leute", "es": "vecinos"}
IMAGE_TEXTS = ("template", "caption")
# Parallel caption templates: "top | bottom"; index i means the same sentence in every language.
TEMPLATES: dict[str, list[str]] = {
    "en": [
        "when the {s} | show up again",
        "{s} be like | every single time",
        "nobody asked | but the {s} did",
        "typical {s} | nothing new",
    ],
    "de": [
        "wenn die {s} | wieder auftauchen",
        "{s} sind so | jedes einzelne Mal",
        "niemand hat gefragt | aber die {s} schon",
        "typisch {s} | nichts Neues",
    ],
    "es": [
        "cuando los {s} | aparecen otra vez",
        "los {s} son así | cada vez",
        "nadie preguntó | pero los {s} sí",
        "típico de {s} | nada nuevo",
    ],
}
# (image concept, subject) pairs each culture judges differently from the base rule.
CULTURE_RULES: dict[str, dict[str, list[tuple[int, int]]]] = {
    "US": {"extra": [], "exempt": []},
    "DE": {"extra": [(1, 2)], "exempt": [(4, 4)]},
    "MX": {"extra": [(3, 0)], "exempt": [(5, 5)]},
    "IN": {"extra": [(2, 5)], "exempt": [(0, 0)]},
    "CN": {"extra": [(4, 1), (0, 3)], "exempt": [(1, 1)]},
}
ROLES = ("original", "text_confounder", "image_confounder")


def is_hateful(concept: int, subject: int, culture: str) -> bool:
    """The hidden rule: base pairing, adjusted by the culture's extra and exempt pairs."""
    rules = CULTURE_RULES[culture]
    pair = (concept, subject)
    if pair in rules["exempt"]:
        return False
    return concept == subject or pair in rules["extra"]


def caption_corpus(languages: tuple[str, ...] = tuple(SUBJECTS)) -> list[str]:
    """Every caption the generator can write: the corpus a tiny tokenizer is trained on."""
    return [
        template.replace(" | ", " ").format(s=subject) for lang in languages for template in TEMPLATES[lang] for subject in SUBJECTS[lang]
    ]


@dataclass
class Scene:
    """Everything needed to redraw one picture: the concept object plus the background clutter."""

    concept: int
    background: tuple[int, int, int]
    box: tuple[float, float, float]  # centre x, centre y, half-size as fractions of the image
    distractors: list[tuple[float, float, float, int]] = field(default_factory=list)


def random_scene(rng: np.random.Generator, concept: int) -> Scene:
    background = tuple(int(v) for v in rng.integers(170, 250, size=3))
    box = (float(rng.uniform(0.35, 0.65)), float(rng.uniform(0.42, 0.58)), float(rng.uniform(0.16, 0.26)))
    distractors = [
        (float(rng.uniform(0.05, 0.95)), float(rng.uniform(0.2, 0.8)), float(rng.uniform(0.03, 0.07)), int(rng.integers(60, 160)))
        for _ in range(int(rng.integers(2, 6)))
    ]
    return Scene(concept, background, box, distractors)


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill: tuple[int, ...]) -> None:
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif shape == "square":
        draw.rectangle((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)
    elif shape == "cross":
        w = r / 3
        draw.rectangle((cx - r, cy - w, cx + r, cy + w), fill=fill)
        draw.rectangle((cx - w, cy - r, cx + w, cy + r), fill=fill)
    elif shape == "ring":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=fill, width=max(2, int(r / 3)))
    else:
        raise ValueError(f"unknown shape {shape}")


def render_meme(scene: Scene, caption: str, size: int, font: ImageFont.ImageFont, stroke_width: int = 1, margin: int = 2) -> bytes:
    """Draw the scene, then the caption as white top/bottom meme text outlined in black; return JPEG bytes."""
    image = Image.new("RGB", (size, size), scene.background)
    draw = ImageDraw.Draw(image)
    for x, y, r, grey in scene.distractors:
        draw.rectangle((x * size - r * size, y * size - r * size, x * size + r * size, y * size + r * size), fill=(grey,) * 3)
    shape, colour = IMAGE_CONCEPTS[scene.concept]
    cx, cy, r = scene.box
    _draw_shape(draw, shape, cx * size, cy * size, r * size, colour)
    top, bottom = (part.strip() for part in caption.split("|"))
    draw.text((size / 2, margin), top, font=font, fill="white", anchor="ma", stroke_width=stroke_width, stroke_fill="black")
    draw.text((size / 2, size - margin), bottom, font=font, fill="white", anchor="md", stroke_width=stroke_width, stroke_fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


class SyntheticMemeSource:
    """Deterministic generator of multi-culture memes; a data source like any raw-dataset converter."""

    name = "synthetic"

    def __init__(
        self,
        num_groups: int = 1000,
        seed: int = 0,
        languages: tuple[str, ...] | list[str] = ("en", "de", "es"),
        cultures: tuple[str, ...] | list[str] = tuple(CULTURE_RULES),
        image_size: int = 128,
        label_noise: float = 0.03,
        match_share: float = 0.45,
        culture_share: float = 0.2,
        split_shares: tuple[float, float] | list[float] = (0.7, 0.15),
        image_text: str = "template",
    ) -> None:
        """`image_text`: what the picture's meme text says: `template` (the caption with a neutral word for
        the subject: the image-only ceiling holds) or `caption` (the caption itself, as OCR needs it)."""
        unknown = set(languages) - set(SUBJECTS)
        if unknown:
            raise ValueError(f"synthetic memes: no captions for languages {sorted(unknown)}; choose from {sorted(SUBJECTS)}")
        unknown = set(cultures) - set(CULTURE_RULES)
        if unknown:
            raise ValueError(f"synthetic memes: no rules for cultures {sorted(unknown)}; choose from {sorted(CULTURE_RULES)}")
        if image_text not in IMAGE_TEXTS:
            raise ValueError(f"synthetic memes: image_text must be one of {IMAGE_TEXTS}, got {image_text!r}")
        self.image_text = image_text
        self.num_groups, self.seed = num_groups, seed
        self.languages, self.cultures = tuple(languages), tuple(cultures)
        self.image_size, self.label_noise = image_size, label_noise
        self.match_share, self.culture_share = match_share, culture_share
        self.split_shares = tuple(split_shares)

    @property
    def heads(self) -> dict[str, dict[str, Any]]:
        return {culture: {"kind": "binary"} for culture in self.cultures}

    def params(self) -> dict[str, Any]:
        """Everything the output depends on; a change regenerates the cached shards."""
        return {
            "generator_version": GENERATOR_VERSION,
            "num_groups": self.num_groups,
            "seed": self.seed,
            "languages": list(self.languages),
            "cultures": list(self.cultures),
            "image_size": self.image_size,
            "label_noise": self.label_noise,
            "match_share": self.match_share,
            "culture_share": self.culture_share,
            "split_shares": list(self.split_shares),
            "image_text": self.image_text,
        }

    def _pairs(self, rng: np.random.Generator) -> tuple[int, int]:
        """Draw the original meme's (concept, subject): matched, culture-specific, or unrelated."""
        k = len(IMAGE_CONCEPTS)
        u = rng.random()
        if u < self.match_share:
            concept = int(rng.integers(k))
            return concept, concept
        extras = sorted({pair for c in self.cultures for pair in CULTURE_RULES[c]["extra"]})
        if u < self.match_share + self.culture_share and extras:
            return extras[int(rng.integers(len(extras)))]
        concept = int(rng.integers(k))
        return concept, int(rng.choice([s for s in range(k) if s != concept]))

    def _split(self, rng: np.random.Generator) -> str:
        u = rng.random()
        train, val = self.split_shares
        return "train" if u < train else "val" if u < train + val else "test"

    def memes(self) -> Iterator[dict[str, Any]]:
        """Yield the abstract memes (before rendering): concept, subject, template, scene, labels."""
        k = len(IMAGE_CONCEPTS)
        for g in range(self.num_groups):
            rng = np.random.default_rng([self.seed, g])
            split = self._split(rng)
            concept, subject = self._pairs(rng)
            template = int(rng.integers(len(TEMPLATES["en"])))
            scene = random_scene(rng, concept)
            other_concept = int(rng.choice([c for c in range(k) if c != concept and c != subject]))
            other_subject = int(rng.choice([s for s in range(k) if s != subject and s != concept]))
            variants = [
                ("original", scene, subject),
                ("text_confounder", random_scene(rng, other_concept), subject),
                ("image_confounder", scene, other_subject),
            ]
            for m, (role, meme_scene, meme_subject) in enumerate(variants):
                rules = {c: is_hateful(meme_scene.concept, meme_subject, c) for c in self.cultures}
                flips = rng.random(len(self.cultures)) < self.label_noise
                labels = {c: int(rules[c] != flip) for c, flip in zip(self.cultures, flips)}
                yield {
                    "group": g,
                    "index": m,
                    "role": role,
                    "split": split,
                    "scene": meme_scene,
                    "subject": meme_subject,
                    "template": template,
                    "labels": labels,
                    "rules": rules,
                }

    def __iter__(self) -> Iterator[Sample]:
        font = ImageFont.load_default(size=max(7, self.image_size // 14))
        for meme in self.memes():
            for lang in self.languages:
                template = TEMPLATES[lang][meme["template"]]
                caption = template.format(s=SUBJECTS[lang][meme["subject"]])
                drawn = caption if self.image_text == "caption" else template.format(s=NEUTRAL_SUBJECT[lang])
                yield Sample(
                    id=f"synthetic/{meme['group']}/{meme['index']}/{lang}",
                    group=f"synthetic/{meme['group']}",
                    lang=lang,
                    text=caption.replace(" | ", " "),
                    image=render_meme(meme["scene"], drawn, self.image_size, font),
                    labels=dict(meme["labels"]),
                    split=meme["split"],
                    meta={
                        "role": meme["role"],
                        "image_concept": IMAGE_CONCEPTS[meme["scene"].concept][0],
                        "subject": SUBJECTS["en"][meme["subject"]],
                        "template": meme["template"],
                        # what the meme shows: the picture's concept and the caption's subject (English), in that order
                        "tags": [CONCEPT_TAGS[meme["scene"].concept], SUBJECTS["en"][meme["subject"]]],
                    },
                )

    def summary(self) -> dict[str, Any]:
        """Measured facts about the generated labels: oracle scores per family (over all memes and within each
        split, the ceiling a model scored on that split is held to) and culture disagreement."""
        memes = list(self.memes())
        shows_subject = self.image_text == "caption"
        by_split = {
            split: oracle_scores([m for m in memes if m["split"] == split], self.cultures, shows_subject)
            for split in ("train", "val", "test")
            if any(m["split"] == split for m in memes)
        }
        return {
            "oracle": oracle_scores(memes, self.cultures, shows_subject),
            "oracle_by_split": by_split,
            "disagreement": disagreement(memes, self.cultures),
        }


def _conditional_scores(memes: list[dict[str, Any]], culture: str, key) -> np.ndarray:
    """P(label = 1 | key(meme)) estimated on the memes themselves: the best a model seeing only `key` can do."""
    labels = np.array([m["labels"][culture] for m in memes], dtype=float)
    keys = [key(m) for m in memes]
    means: dict[Any, float] = {}
    for value in set(keys):
        mask = np.array([k == value for k in keys])
        means[value] = float(labels[mask].mean())
    return np.array([means[k] for k in keys])


def oracle_scores(
    memes: list[dict[str, Any]], cultures: tuple[str, ...], image_shows_subject: bool = False
) -> dict[str, dict[str, dict[str, float]]]:
    """Best AUROC / accuracy per family: fusion sees (concept, subject), text only the subject, image only the
    concept, or (concept, subject) when the caption itself is drawn on it (`image_shows_subject`).

    Estimated within `memes` (P(label | what the family sees) on these very memes), so on a split it is the
    best any function of that view scores on that split: an upper bound, not an expectation."""
    from sklearn.metrics import accuracy_score, roc_auc_score

    def pair(m: dict[str, Any]) -> tuple[int, int]:
        return m["scene"].concept, m["subject"]

    views = {
        "fusion": pair,
        "text_only": lambda m: m["subject"],
        "image_only": pair if image_shows_subject else lambda m: m["scene"].concept,
    }
    result: dict[str, dict[str, dict[str, float]]] = {}
    for family, key in views.items():
        result[family] = {}
        for culture in cultures:
            labels = np.array([m["labels"][culture] for m in memes])
            scores = _conditional_scores(memes, culture, key)
            result[family][culture] = {
                "auroc": round(float(roc_auc_score(labels, scores)), 4),
                "acc": round(float(accuracy_score(labels, scores > 0.5)), 4),
            }
        result[family]["mean"] = {
            metric: round(float(np.mean([result[family][c][metric] for c in cultures])), 4) for metric in ("auroc", "acc")
        }
    return result


def disagreement(memes: list[dict[str, Any]], cultures: tuple[str, ...]) -> dict[str, Any]:
    """Share of memes on which cultures' labels differ: overall and for each pair of cultures."""
    table = np.array([[m["labels"][c] for c in cultures] for m in memes])
    pairs = {
        f"{a}-{b}": round(float((table[:, i] != table[:, j]).mean()), 4)
        for (i, a), (j, b) in itertools.combinations(enumerate(cultures), 2)
    }
    return {
        "any": round(float((table.min(axis=1) != table.max(axis=1)).mean()), 4),
        "pairs": pairs,
        "positive_rate": {c: round(float(table[:, i].mean()), 4) for i, c in enumerate(cultures)},
    }


def summary_markdown(summary: dict) -> str:
    """The generator's measured oracle scores and culture disagreement (`SyntheticMemeSource.summary()`) as the tables
    docs/synthetic.md shows (`crossmod synthetic markdown=true` prints them)."""
    cultures = [c for c in summary["oracle"]["fusion"] if c != "mean"]
    lines = ["| family sees | " + " | ".join(f"{c} AUROC / acc" for c in cultures) + " | mean AUROC / acc |"]
    lines.append("|---|" + "---|" * (len(cultures) + 1))
    for family, scores in summary["oracle"].items():
        cells = [f"{scores[c]['auroc']:.3f} / {scores[c]['acc']:.3f}" for c in [*cultures, "mean"]]
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    splits = summary["oracle_by_split"]
    lines += ["", "| family sees | " + " | ".join(f"{split} mean AUROC" for split in splits) + " |"]
    lines.append("|---|" + "---|" * len(splits))
    for family in summary["oracle"]:
        lines.append(f"| {family} | " + " | ".join(f"{splits[split][family]['mean']['auroc']:.3f}" for split in splits) + " |")
    lines += ["", "| culture | positive rate |", "|---|---|"]
    lines += [f"| {culture} | {rate:.3f} |" for culture, rate in summary["disagreement"]["positive_rate"].items()]
    lines += ["", f"Memes on which at least two cultures disagree: {summary['disagreement']['any']:.3f}", ""]
    lines += ["| pair | disagreement |", "|---|---|"]
    lines += [f"| {pair} | {share:.3f} |" for pair, share in summary["disagreement"]["pairs"].items()]
    return "\n".join(lines)

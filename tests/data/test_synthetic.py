"""The synthetic memes' ceilings are true: the picture carries nothing about the subject unless asked to, the
per-split ceiling is the best any function of a view scores on that split, and docs/synthetic.md prints
what the generator measures."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
from omegaconf import OmegaConf
from sklearn.metrics import roc_auc_score

from crossmod.data import synthetic
from crossmod.data.synthetic import SyntheticMemeSource
from tests.conftest import ROOT


def _by_role(source: SyntheticMemeSource) -> dict[tuple[str, str], dict[str, bytes]]:
    images: dict[tuple[str, str], dict[str, bytes]] = defaultdict(dict)
    for sample in source:
        _, group, _, lang = sample.id.split("/")
        images[(group, lang)][sample.meta["role"]] = sample.image
    return images


def test_the_picture_says_nothing_about_the_subject():
    """An original and its image confounder share scene and template and differ only in subject: with the
    default meme text their pictures are the same bytes, so no image model can tell the subjects apart;
    with `image_text=caption` the drawn subject makes them differ."""
    template = _by_role(SyntheticMemeSource(num_groups=6, image_size=64))
    assert all(roles["original"] == roles["image_confounder"] for roles in template.values())
    assert all(roles["original"] != roles["text_confounder"] for roles in template.values())
    caption = _by_role(SyntheticMemeSource(num_groups=6, image_size=64, image_text="caption"))
    assert all(roles["original"] != roles["image_confounder"] for roles in caption.values())


def test_tags_name_the_pictures_concept_and_the_captions_subject():
    """meta.tags (the tag generator's target): the drawn shape with its colour, then the caption's subject in English."""
    colours = {"red": (215, 35, 35), "blue": (35, 75, 215), "green": (30, 160, 50), "purple": (145, 50, 185)}
    colours |= {"orange": (240, 140, 10), "teal": (10, 165, 175)}
    for tag, (shape, rgb) in zip(synthetic.CONCEPT_TAGS, synthetic.IMAGE_CONCEPTS, strict=True):
        assert tag.split() == [next(c for c, v in colours.items() if v == rgb), shape]
    for sample in SyntheticMemeSource(num_groups=3, image_size=64):
        concept, subject = sample.meta["tags"]
        assert concept.endswith(sample.meta["image_concept"]) and subject == sample.meta["subject"]
        index = synthetic.SUBJECTS["en"].index(subject)
        assert synthetic.SUBJECTS[sample.lang][index] in sample.text


def test_unknown_image_text_is_refused():
    with pytest.raises(ValueError, match="image_text must be one of"):
        SyntheticMemeSource(num_groups=1, image_text="subject")


def test_split_ceiling_bounds_every_scoring_of_the_view():
    """The val ceiling of a view is P(label | view) fitted on val: no ordering of the view's values scores a
    higher AUROC on val (checked against every ordering of the six image concepts for one culture)."""
    source = SyntheticMemeSource(num_groups=200, seed=1, label_noise=0.01)
    summary = source.summary()
    memes = [m for m in source.memes() if m["split"] == "val"]
    labels = np.array([m["labels"]["MX"] for m in memes])
    concepts = np.array([m["scene"].concept for m in memes])
    best = max(roc_auc_score(labels, np.array(order)[concepts]) for order in itertools.permutations(range(6)))
    assert summary["oracle_by_split"]["val"]["image_only"]["MX"]["auroc"] == pytest.approx(best, abs=1e-4)
    # Drawing the caption hands the image model the subject: its ceiling becomes fusion's.
    shown = SyntheticMemeSource(num_groups=200, seed=1, label_noise=0.01, image_text="caption").summary()["oracle"]
    assert shown["image_only"] == shown["fusion"] and summary["oracle"]["image_only"]["mean"]["auroc"] < 0.75


def test_docs_print_what_the_generator_measures():
    defaults = OmegaConf.load(ROOT / "src" / "crossmod" / "configs" / "synthetic_rule.yaml")  # what `crossmod synthetic` builds
    source = SyntheticMemeSource(num_groups=defaults.num_groups, seed=defaults.seed, label_noise=defaults.label_noise)
    printed = synthetic.summary_markdown(source.summary()).strip()
    tables = printed.split("\n\nMemes on which")[0]
    docs = (ROOT / "docs" / "synthetic.md").read_text()
    missing = [line for line in tables.splitlines() if line and line not in docs]
    assert not missing, f"docs/synthetic.md is stale; rerun crossmod synthetic markdown=true: {missing}"

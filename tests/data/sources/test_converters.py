"""Each converter on a correct fixture of its layout: heads, ids, groups, labels, text, meta, original bytes."""

from __future__ import annotations

import json

import pytest

from crossmod.data.folds import iter_records
from crossmod.data.shards import fingerprint
from tests.data.sources import layouts
from tests.data.sources.helpers import convert, source


def samples(src) -> dict:
    return {s.id: s for s in src}


# ---------------------------------------------------------------------------------------- Hateful Memes
def test_hateful_memes_reads_the_seen_splits_with_original_image_bytes(tmp_path):
    raw = layouts.hateful_memes(tmp_path / "raw")
    got = samples(source("hateful_memes", raw))
    assert len(got) == 10
    meme = got["hateful_memes/1001"]
    assert (meme.group, meme.lang, meme.split, meme.labels) == ("hateful_memes/1001", "en", "train", {"hateful": 0})
    assert meme.image == (raw / "img" / "01001.png").read_bytes()
    assert sorted({s.split for s in got.values()}) == ["test", "train", "val"]


def test_hateful_memes_unlabeled_test_file_gives_masked_labels(tmp_path):
    raw = layouts.hateful_memes(tmp_path / "raw", test_labels=False)
    manifest = convert(source("hateful_memes", raw), tmp_path / "shards")
    assert manifest["counts"]["label"]["hateful"]["null"] == 2


def test_hateful_memes_first_release_and_custom_split_maps(tmp_path):
    raw = layouts.hateful_memes(tmp_path / "raw")
    (raw / "dev_seen.jsonl").rename(raw / "dev.jsonl")
    (raw / "test_seen.jsonl").rename(raw / "test.jsonl")
    with pytest.raises(FileNotFoundError, match="phase1"):
        source("hateful_memes", raw)
    assert len(samples(source("hateful_memes", raw, splits="phase1"))) == 10
    only = samples(source("hateful_memes", raw, splits={"train": "train.jsonl", "val": "dev.jsonl"}))
    assert len(only) == 8


def test_image_lookup_is_tolerant_only_when_unambiguous(tmp_path):
    raw = layouts.hateful_memes(tmp_path / "raw", train=3, dev=1, test=1)
    lines = [json.loads(line) for line in (raw / "train.jsonl").read_text().splitlines()]
    lines[0]["img"] = "img/1001.png"  # leading zeros lost
    lines[1]["img"] = "img/01002.PNG"  # extension case differs
    layouts.write_jsonl(raw / "train.jsonl", lines)
    got = samples(source("hateful_memes", raw))
    assert got["hateful_memes/1001"].image == (raw / "img" / "01001.png").read_bytes()
    assert got["hateful_memes/1002"].image is not None
    (raw / "img" / "01003.jpg").write_bytes(layouts.image_bytes(1))
    lines[2]["img"] = "img/01003.gif"
    layouts.write_jsonl(raw / "train.jsonl", lines)
    with pytest.raises(ValueError, match="ambiguous image for '01003'.*01003.jpg.*01003.png"):
        samples(source("hateful_memes", raw))


# ---------------------------------------------------------------------------------------- Multi3Hate
def test_multi3hate_labels_every_language_version_with_all_five_cultures(tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw")
    got = samples(source("multi3hate", raw))
    assert len(got) == 30
    versions = [got[f"multi3hate/13/{lang}"] for lang in layouts.M3H_LANGUAGES]
    assert {v.group for v in versions} == {"multi3hate/13"}
    expected = dict(zip(["US", "DE", "MX", "CN", "IN"], (((13 + c) // 3) % 2 for c in range(5))))  # file order US,DE,MX,CN,IN
    assert all(v.labels == expected for v in versions)
    de = got["multi3hate/13/de"]
    assert de.text == "[de] oben 13\nunten"  # " <sep> " became a newline; the BOM header was read
    assert de.meta["template"] == "Condescending-Wonka" and de.meta["original_en"] == "top text 13\nbottom text"
    assert de.meta["votes"]["de"] == {"hate": 2, "total": 3}
    assert de.image == (raw / "memes" / "de" / "Condescending-Wonka" / "13.jpg").read_bytes()


def test_multi3hate_options_and_summary(tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw")
    src = source("multi3hate", tmp_path / "raw", languages=["en", "zh"], caption_separator=" | ")
    got = samples(src)
    assert {s.lang for s in got.values()} == {"en", "zh"}
    assert got["multi3hate/10/en"].text == "top text 10 | bottom text"
    summary = src.summary()
    assert summary["memes"] == 6 and summary["raw_annotations"]["rows"] == 6 * 5 * 3
    assert len(src.final_labels) == 6 and set(src.final_labels["10"]) == set(layouts.CULTURES)
    with pytest.raises(ValueError, match="unknown Multi3Hate language codes"):
        source("multi3hate", raw, languages=["fr"])


def test_multi3hate_accepts_the_repository_root_and_finds_renamed_template_folders(tmp_path):
    raw = layouts.multi3hate(tmp_path / "repo" / "data")
    (raw / "memes" / "en" / "Success-Kid").rename(raw / "memes" / "en" / "success kid")
    got = samples(source("multi3hate", tmp_path / "repo"))
    assert got["multi3hate/10/en"].meta["image_file"] == "memes/en/success kid/10.jpg"


# ---------------------------------------------------------------------------------------- MHC
def test_mhc_text_only_cases_with_functional_meta(tmp_path):
    raw = layouts.mhc(tmp_path / "raw")
    got = samples(source("mhc", raw))
    assert len(got) == 12 and all(s.image is None for s in got.values())
    german, dutch = got["mhc/german-3"], got["mhc/dutch-1"]
    assert (german.lang, dutch.lang) == ("de", "nl")
    assert german.labels == {"hateful": 0} and dutch.labels == {"hateful": 1}
    assert german.group == got["mhc/german-4"].group == "mhc/de/templ-2"  # one template, one fold group
    assert dutch.meta["gender_male"] is None and dutch.meta["functionality"] == "derog_neg_emote_h"
    assert german.meta["label_annotated"] == ["hateful", "hateful", "non-hateful"]
    assert german.meta["head_votes"] == {"hateful": [2, 3]}  # the annotators' votes, beside the gold label (0 here)
    assert german.meta["disagreement_in_case"] is False and got["mhc/german-2"].meta["disagreement_in_case"] is True
    assert {s.lang for s in samples(source("mhc", raw, languages=["nl"])).values()} == {"nl"}


# ---------------------------------------------------------------------------------------- ToxicTags
def test_toxictags_two_stage_heads_and_the_tags_switch(tmp_path):
    raw = layouts.toxictags(tmp_path / "raw")
    plain = source("toxictags", raw)
    got = samples(plain)
    labels = {s.meta["label"]: s.labels for s in got.values()}
    # stage II is the study's four-way question: normal is a class; only undecided memes are masked
    assert plain.heads["toxic_type"]["classes"] == ["hateful", "dangerous", "offensive", "normal"]
    assert labels["normal"] == {"toxic": 0, "toxic_type": 3}
    assert labels["undecided"] == {"toxic": 1, "toxic_type": None}
    assert labels["hateful"] == {"toxic": 1, "toxic_type": 0}
    assert labels["dangerous"] == {"toxic": 1, "toxic_type": 1}
    assert labels["offensive"] == {"toxic": 1, "toxic_type": 2}
    assert got["toxictags/tt1"].text == "post title 1\nocr text 1"
    tagged = source("toxictags", raw, include_tags=True)
    assert samples(tagged)["toxictags/tt1"].text == "post title 1\nocr text 1\nTags: funny, tag1"
    assert fingerprint(tagged.params()) != fingerprint(plain.params())
    splits = {s.split for s in samples(source("toxictags", raw, val_share=0.0)).values()}
    assert splits == {"train", "test"}
    assert {s.split for s in samples(source("toxictags", raw, val_share=0.5)).values()} == {"train", "val", "test"}


# ---------------------------------------------------------------------------------------- MemeBridge
def test_memebridge_multiclass_and_multilabel_heads(tmp_path):
    raw = layouts.memebridge(tmp_path / "raw")
    got = samples(source("memebridge", raw))
    first = got["memebridge/1"]
    assert first.labels == {"sentiment": 1, "emotion": [1, 0, 1, 0]}  # neutral; sarcastic + offensive
    assert got["memebridge/2"].labels["emotion"] == [0, 0, 0, 0]
    assert first.meta["knowledge_type"] == "cultural" and first.meta["explanation"] == "why meme 1 is funny"
    lines = (raw / "memebridge.jsonl").read_text().splitlines()
    item = json.loads(lines[0])
    item.update(sentiment=None, emotions=None)
    lines[0] = json.dumps(item)
    (raw / "memebridge.jsonl").write_text("\n".join(lines) + "\n")
    assert samples(source("memebridge", raw))["memebridge/0"].labels == {"sentiment": None, "emotion": None}


@pytest.mark.parametrize("dataset", list(layouts.BUILDERS))
def test_shards_hold_the_records_and_the_params(dataset, tmp_path):
    raw = layouts.BUILDERS[dataset](tmp_path / "raw")
    src = source(dataset, raw)
    manifest = convert(src, tmp_path / "shards")
    records = list(iter_records(tmp_path / "shards", [s["name"] for s in manifest["shards"]]))
    assert len(records) == manifest["samples_written"] == manifest["inputs_read"]
    assert manifest["params"]["converter"] == dataset and manifest["params"]["files"]
    assert manifest["heads"] == src.heads

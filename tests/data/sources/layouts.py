"""Tiny copies of each dataset's published layout, written by the tests (a few items each)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from PIL import Image

CULTURES = ("US", "DE", "MX", "IN", "CN")
M3H_LANGUAGES = ("en", "de", "es", "hi", "zh")
MHC_HEADER = (
    "mhc_case_id,functionality,test_case,label_gold,target_ident,ref_case_id,ref_templ_id,templ_id,case_templ,"
    "gender_male,gender_female,label_annotated,label_annotated_maj,disagreement_in_case,disagreement_in_template"
)
MHC_HEADER_NO_GENDER = MHC_HEADER.replace("gender_male,gender_female,", "")


def image_bytes(seed: int, fmt: str = "JPEG", size: int = 24) -> bytes:
    colour = ((seed * 53) % 256, (seed * 97) % 256, (seed * 31) % 256)
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buffer, format=fmt)
    return buffer.getvalue()


def bomb_png(width: int = 20000, height: int = 20000) -> bytes:
    """A few KB on disk, width × height pixels once decoded: above PIL's decompression-bomb limit."""
    buffer = io.BytesIO()
    Image.new("1", (width, height)).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def write_jsonl(path: Path, items: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")


def write_csv(path: Path, header: list[str], rows: list[list], bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(("\ufeff" if bom else "") + buffer.getvalue(), encoding="utf-8")


# ---------------------------------------------------------------------------------------- Hateful Memes
def hateful_memes(root: Path, train: int = 6, dev: int = 2, test: int = 2, test_labels: bool = True) -> Path:
    """train.jsonl, dev_seen.jsonl, test_seen.jsonl + img/NNNNN.png, ids as ints (leading zeros lost)."""
    (root / "img").mkdir(parents=True, exist_ok=True)
    meme_id = 1000
    for file, count in (("train.jsonl", train), ("dev_seen.jsonl", dev), ("test_seen.jsonl", test)):
        items = []
        for k in range(count):
            meme_id += 1
            (root / "img" / f"{meme_id:05d}.png").write_bytes(image_bytes(meme_id, "PNG"))
            item = {"id": meme_id, "img": f"img/{meme_id:05d}.png", "label": k % 2, "text": f"meme text number {meme_id}"}
            if file.startswith("test") and not test_labels:
                del item["label"]
            items.append(item)
        write_jsonl(root / file, items)
    return root


# ---------------------------------------------------------------------------------------- Multi3Hate
M3H_TEMPLATES = ["Success-Kid", "Condescending-Wonka", "Bad-Luck-Brian"]


M3H_RAW_COLUMNS = ["dataset_language", "User ID", "Meme ID", "Education", "Politcal Party", "Nationality", "Age", "Sex"]
M3H_RAW_COLUMNS += ["Ethnicity simplified", "Country of birth", "hatespeech"]
# Education, Politcal Party, Nationality, Age, Sex, Ethnicity simplified, Country of birth of annotators 0, 1, 2 …
M3H_ANNOTATOR = [
    ["Bachelor", "Independent", "United States", "34", "Female", "White", "United States"],
    ["High school", "Democrat", "United States", "27", "Male", "Black", "United States"],
    ["Master", "", "United States", "45", "Female", "Asian", "India"],
]


def multi3hate(
    root: Path,
    memes: int = 6,
    languages: tuple[str, ...] = M3H_LANGUAGES,
    raw: bool = True,
    labels: list[dict[str, int]] | None = None,
    votes: list[dict[str, list[int]]] | None = None,
) -> Path:
    """captions/{lang}.csv, final_annotations.csv (Meme ID,US,DE,MX,CN,IN), memes/{lang}/{Template}/{id}.jpg.

    `labels[k]` (culture → 0/1) and `votes[k]` (language → one vote per annotator `user0`, `user1` …)
    replace the generated final labels and raw votes of the k-th meme.
    """
    ids = [3 * k + 10 for k in range(memes)]
    annotations = [[i, *(((i + c) // 3) % 2 for c in range(5))] for i in ids]  # columns US,DE,MX,CN,IN
    if labels is not None:
        annotations = [[i, *(labels[k][c] for c in ("US", "DE", "MX", "CN", "IN"))] for k, i in enumerate(ids)]
    write_csv(root / "final_annotations.csv", ["Meme ID", "US", "DE", "MX", "CN", "IN"], annotations)
    for lang in languages:
        rows = []
        for k, i in enumerate(ids):
            template = M3H_TEMPLATES[k % len(M3H_TEMPLATES)]
            folder = root / "memes" / lang / template
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i}.jpg").write_bytes(image_bytes(i + len(lang)))
            english = f"top text {i} <sep> bottom text"
            rows.append([i, template, english, english if lang == "en" else f"[{lang}] oben {i} <sep> unten"])
        write_csv(
            root / "captions" / f"{lang}.csv", ["Meme ID", "Template Name", "Original (English)", "Translation"], rows, bom=lang == "de"
        )
    if raw:
        if votes is None:
            cast = [(lang, u, i, (i + u) % 2) for i in ids for lang in languages for u in range(3)]
        else:
            cast = [(lang, u, i, v) for k, i in enumerate(ids) for lang, given in votes[k].items() for u, v in enumerate(given)]
        # the release's columns, its misspelt "Politcal Party" and its float votes (1.0 / 0.0) included
        rows = [[lang, f"{lang}-user{u}", i, *M3H_ANNOTATOR[u % len(M3H_ANNOTATOR)], f"{float(v):.1f}"] for lang, u, i, v in cast]
        write_csv(root / "raw_annotations.csv", M3H_RAW_COLUMNS, rows)
    return root


# ---------------------------------------------------------------------------------------- MHC
def mhc_row(language: str, n: int, label: str = "hateful", text: str | None = None, templ: int | None = None, gender: bool = True) -> str:
    text = text if text is not None else f"{language} case {n}"
    annotated = "\"['hateful', 'hateful', 'non-hateful']\""
    gender_cells = ",," if gender else ""
    return (
        f"{language}-{n},derog_neg_emote_h,{text},{label},women,,,{templ if templ is not None else (n + 1) // 2},"
        f"I hate [IDENT_P].,{gender_cells}{annotated},hateful,{n % 2 == 0},False"
    )


def mhc(root: Path, cases: int = 6) -> Path:
    """hatecheck_cases_final_german.csv (with gender columns) and _dutch.csv (without), `cases` rows each."""
    root.mkdir(parents=True, exist_ok=True)
    for language, gender in (("german", True), ("dutch", False)):
        header = MHC_HEADER if gender else MHC_HEADER_NO_GENDER
        rows = [mhc_row(language, n, "hateful" if n % 3 else "non-hateful", gender=gender) for n in range(1, cases + 1)]
        (root / f"hatecheck_cases_final_{language}.csv").write_text(header + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return root


# ---------------------------------------------------------------------------------------- ToxicTags, MemeBridge
TOXIC_LABELS = ["normal", "hateful", "dangerous", "offensive", "undecided", "hateful", "normal", "offensive"]


def toxictags(root: Path, items: int = 8) -> Path:
    """toxictags.jsonl + images/."""
    lines = []
    for k in range(items):
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "images" / f"tt{k}.jpg").write_bytes(image_bytes(200 + k))
        lines.append(
            {
                "id": f"tt{k}",
                "image": f"images/tt{k}.jpg",
                "title": f"post title {k}",
                "ocr_text": f"ocr text {k}",
                "tags": ["funny", f"tag{k}"],
                "label": TOXIC_LABELS[k % len(TOXIC_LABELS)],
                "split": "test" if k >= items - 2 else "train",
            }
        )
    write_jsonl(root / "toxictags.jsonl", lines)
    return root


SENTIMENTS = ["positive", "neutral", "negative"]
EMOTION_SETS = [["humorous"], ["sarcastic", "offensive"], [], ["motivational", "humorous"]]


def memebridge(root: Path, items: int = 8) -> Path:
    """memebridge.jsonl + images/."""
    lines = []
    for k in range(items):
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "images" / f"mb{k}.png").write_bytes(image_bytes(300 + k, "PNG"))
        lines.append(
            {
                "id": k,
                "image": f"images/mb{k}.png",
                "text": f"meme caption {k}",
                "sentiment": SENTIMENTS[k % 3],
                "emotions": EMOTION_SETS[k % len(EMOTION_SETS)],
                "knowledge_type": "cultural" if k % 4 else "general",
                "topic": ["politics", "sports", "celebrities"][k % 3],
                "explanation": f"why meme {k} is funny",
                "split": ["train", "train", "val", "test"][k % 4],
            }
        )
    write_jsonl(root / "memebridge.jsonl", lines)
    return root


BUILDERS = {
    "hateful_memes": hateful_memes,
    "multi3hate": multi3hate,
    "mhc": mhc,
    "toxictags": toxictags,
    "memebridge": memebridge,
}

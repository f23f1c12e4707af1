"""The memes `predict.py` scores: a folder of images, a JSONL file, or a shard directory.

Inputs get the checks conversion applies: image paths stay inside their root (the folder, or the
JSONL file's folder), image files are size- and signature-checked before they are read and fully
decoded within PIL's pixel limit, JSONL lines must be UTF-8 JSON objects without lone surrogates, and every
id is read once (a second meme under an id would share the first one's row of predictions).
A bad input is an `InputError` naming file, line and reason, or with `on_error="skip"` a
`Skipped` record in `Inputs.skipped`: inputs read = memes returned + skipped, nothing dropped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossmod.data.paths import OutsideRoot, ensure_within, resolve_within
from crossmod.data.remote import is_remote
from crossmod.data.sample import IMAGE_EXTENSIONS
from crossmod.data.shards import MANIFEST, Skipped, read_samples
from crossmod.data.sources.images import MAX_IMAGE_BYTES, check_image, load_image
from crossmod.data.sources.readers import read_jsonl

IMAGE_SUFFIXES = {f".{ext}" for ext in IMAGE_EXTENSIONS} | {".jpeg"}
ON_ERROR = ("raise", "skip")


class InputError(ValueError):
    """One meme that cannot be scored; the message names it (`file:line` or file) and the reason."""

    def __init__(self, where: str, reason: str) -> None:
        self.where, self.reason = where, reason
        super().__init__(f"{where}: cannot read this meme ({reason}); with on_error=skip such inputs are counted and skipped")


class Inputs(list):
    """The memes read, in input order (sample dicts), plus `skipped`: the inputs that could not be used."""

    def __init__(self, records: list[dict[str, Any]], skipped: list[Skipped]) -> None:
        super().__init__(records)
        self.skipped = skipped

    @property
    def read(self) -> int:
        return len(self) + len(self.skipped)


def read_inputs(
    path: Path | str, splits: list[str] | None = None, on_error: str = "raise", max_image_bytes: int = MAX_IMAGE_BYTES
) -> Inputs:
    """Memes as sample dicts (id, text, image bytes, lang, labels={}); bad inputs raise or are counted.
    `path`: a folder of images, a JSONL file, or a shard folder, local or a URL of one (`crossmod.data.remote`)."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    if is_remote(path):
        items = _from_shards(str(path), splits, max_image_bytes)
    elif (path := Path(path)).is_dir() and (path / MANIFEST).is_file():
        items = _from_shards(path, splits, max_image_bytes)
    elif path.is_dir():
        items = _from_folder(path, max_image_bytes)
    else:
        items = _from_jsonl(path, max_image_bytes)
    records, skipped, seen = [], [], {}
    for number, item in enumerate(items, 1):
        if not isinstance(item, InputError) and str(item["id"]) in seen:  # two memes, one row of predictions: which?
            item = InputError(f"{path}: input {number}, id {str(item['id'])[:100]!r}", f"the id of input {seen[str(item['id'])]} again")
        if isinstance(item, InputError):
            if on_error == "raise":
                raise item
            skipped.append(Skipped(input=item.where, reason=item.reason))
        else:
            seen[str(item["id"])] = number
            records.append(item)
    if not records:
        raise ValueError(f"{path}: no meme could be read ({len(skipped)} inputs skipped)")
    return Inputs(records, skipped)


def _record(meme_id: str, text: str, image: bytes | None, lang: str) -> dict[str, Any]:
    return {"id": meme_id, "text": text, "image": image, "lang": lang, "labels": {}}


def _from_folder(folder: Path, max_image_bytes: int) -> Iterator[dict[str, Any] | InputError]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{folder}: no images ({sorted(IMAGE_SUFFIXES)}) and no {MANIFEST}")
    for file in files:
        if not file.name.isprintable():  # undecodable bytes (surrogates), control characters
            shown = os.fsencode(file.name).decode("utf-8", "backslashreplace")
            yield InputError(str(folder / shown), "the file name is not printable UTF-8, so it cannot serve as the meme's id; rename it")
            continue
        try:
            ensure_within(folder, file, "image file")
        except OutsideRoot as error:
            yield InputError(str(file), str(error))
            continue
        image, problem = load_image(file, max_image_bytes)
        yield InputError(str(file), problem) if problem else _record(file.stem, "", image, "en")


def _from_jsonl(path: Path, max_image_bytes: int) -> Iterator[dict[str, Any] | InputError]:
    """`{"id", "text", "image": <path relative to the file>, "lang"}` per line."""
    for row in read_jsonl(path):
        where = f"{path}:{row.line}"
        if row.problem:
            yield InputError(where, row.problem)
            continue
        item = row.values
        meme_id, text, lang, reference = item.get("id"), item.get("text"), item.get("lang"), item.get("image")
        if meme_id is None or isinstance(meme_id, bool) or not isinstance(meme_id, str | int) or not str(meme_id).strip():
            yield InputError(where, f"'id' must be a non-empty string or number, got {meme_id!r}")
        elif text is not None and not isinstance(text, str):
            yield InputError(where, f"'text' must be a string, got {text!r}")
        elif lang is not None and not isinstance(lang, str):
            yield InputError(where, f"'lang' must be a string, got {lang!r}")
        elif reference is not None and not isinstance(reference, str):
            yield InputError(where, f"'image' must be a path relative to {path.parent}, got {reference!r}")
        else:
            image, problem = _jsonl_image(path.parent, reference, max_image_bytes) if reference else (None, None)
            yield InputError(where, problem) if problem else _record(str(meme_id), text or "", image, lang or "en")


def _jsonl_image(root: Path, reference: str, max_image_bytes: int) -> tuple[bytes | None, str | None]:
    try:
        file = resolve_within(root, reference, "'image' path")
    except OutsideRoot as error:
        return None, str(error)
    return load_image(file, max_image_bytes)


def _from_shards(directory: Path | str, splits: list[str] | None, max_image_bytes: int) -> Iterator[dict[str, Any] | InputError]:
    """Shards may come from elsewhere: their images get the conversion's checks again."""
    for sample in read_samples(directory, splits):
        image = sample.get("image")
        problem = None
        if image is not None and len(image) > max_image_bytes:
            problem = f"image is {len(image)} bytes, above the limit of {max_image_bytes} (max_image_bytes)"
        elif image is not None:
            problem = check_image(image)
        yield InputError(f"{directory}: sample {sample.get('id')}", problem) if problem else sample


HOW_TO_PROVIDE = {
    "text": "run with ocr=rapidocr (or ocr=tesseract) to read each caption off its image, or give the captions ('text' in a JSONL file)",
    "image": "give the images ('image' paths in a JSONL file, or a folder of images)",
}


def missing_inputs(records: list[dict[str, Any]], needs: frozenset[str]) -> dict[str, list[str]]:
    """Ids of the memes lacking each input the model reads (`text`: empty or blank, `image`: none)."""
    lacking = {
        "text": [str(r["id"]) for r in records if not str(r.get("text") or "").strip()],
        "image": [str(r["id"]) for r in records if r.get("image") is None],
    }
    return {name: ids for name, ids in lacking.items() if name in needs and ids}


def check_inputs(records: list[dict[str, Any]], needs: frozenset[str], allowed: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Stop, naming the input and how to provide it, when memes lack an input the model reads and the user
    has not allowed that (`allow_missing`); return what is missing but allowed, to be reported."""
    missing = missing_inputs(records, needs)
    refused = {name: ids for name, ids in missing.items() if name not in allowed}
    if refused:
        name, ids = next(iter(refused.items()))
        shown = ", ".join(ids[:5]) + (" …" if len(ids) > 5 else "")
        raise ValueError(
            f"{len(ids)} of {len(records)} memes have no {name} ({shown}), and this model reads the {name}: "
            f"{HOW_TO_PROVIDE[name]}; or allow_missing=[{name}] to score them without it"
        )
    return missing

"""Multilingual HateCheck: the ten `hatecheck_cases_final_{language}.csv` files, text only.

One binary head `hateful` (`label_gold`: hateful / non-hateful). The functional-test fields
(functionality, target_ident, case_templ or the gendered templates, disagreement flags …) go to
`meta` for the per-functionality reports. `label_annotated` (each case's three annotators' labels) also gives the
head's votes (`meta.head_votes`: [hateful votes, votes]), what `model/objective=soft_votes` trains on and the soft
metrics score; a list holding a label other than the two is kept as written and gives no votes. Dutch and Mandarin have no gender columns; Italian and
Spanish leave `case_templ` empty and use `gender_male` / `gender_female` instead. MHC is an
evaluation set without splits: cross-validate with `fold=k`. Cases built from one template in one
language share a fold group, so a template's variants never sit on both sides of a fold.
Test cases are single sentences: a CSV field spanning lines is a stray quote, reported per line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossmod.data.sample import Sample
from crossmod.data.sources.base import RawDataError, RawSource, check_known
from crossmod.data.sources.readers import FileProblem, read_csv

LANGUAGES: dict[str, str] = {
    "arabic": "ar",
    "dutch": "nl",
    "french": "fr",
    "german": "de",
    "hindi": "hi",
    "italian": "it",
    "mandarin": "zh",
    "polish": "pl",
    "portuguese": "pt",
    "spanish": "es",
}
FILE_PATTERN = re.compile(r"hatecheck_cases_final_(.+)\.csv", re.IGNORECASE)
LABELS = {"hateful": 1, "non-hateful": 0}
REQUIRED = ["mhc_case_id", "functionality", "test_case", "label_gold"]
OPTIONAL = [
    "target_ident",
    "ref_case_id",
    "ref_templ_id",
    "templ_id",
    "case_templ",
    "gender_male",
    "gender_female",
    "label_annotated",
    "label_annotated_maj",
    "disagreement_in_case",
    "disagreement_in_template",
]
FLAGS = ("disagreement_in_case", "disagreement_in_template")


def _flag(value: str | None) -> bool | None:
    text = (value or "").strip().casefold()
    return {"true": True, "false": False, "1": True, "0": False}.get(text)


def _votes(annotated: list[str] | str | None) -> list[int] | None:
    """[hateful votes, votes] of the annotators' labels; None unless every label is one of the two."""
    if not isinstance(annotated, list) or not annotated or any(v.strip().casefold() not in LABELS for v in annotated):
        return None
    return [sum(LABELS[v.strip().casefold()] for v in annotated), len(annotated)]


def _annotations(value: str | None) -> list[str] | str | None:
    """`"['hateful', 'hateful', 'non-hateful']"` → a list (the raw text when it is no literal list)."""
    if not value or not value.strip():
        return None
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value
    return [str(v) for v in parsed] if isinstance(parsed, list | tuple) else value


class MHCSource(RawSource):
    """Converts the Multilingual HateCheck test cases (all languages found, or `languages`)."""

    name = "mhc"
    version = 2  # 2: head_votes from label_annotated
    heads = {"hateful": {"kind": "binary"}}

    def __init__(self, raw_dir: str | Path, languages: list[str] | None = None, on_error: str = "raise") -> None:
        super().__init__(raw_dir, on_error)
        if languages is not None:
            check_known(languages, LANGUAGES.values(), "MHC language codes")
        self.languages = sorted(languages) if languages is not None else None
        self.files = sorted(p for p in self.raw_dir.iterdir() if FILE_PATTERN.fullmatch(p.name))
        if not self.files:
            raise FileNotFoundError(f"mhc: no hatecheck_cases_final_<language>.csv files in {self.raw_dir}")
        if self.languages is not None:
            found = {LANGUAGES.get(FILE_PATTERN.fullmatch(p.name).group(1).lower()) for p in self.files}
            missing = sorted(set(self.languages) - found)
            if missing:
                raise FileNotFoundError(f"mhc: no file for languages {missing} in {self.raw_dir}")

    def options(self) -> dict[str, Any]:
        return {"languages": self.languages}

    def annotation_files(self) -> list[Path]:
        return list(self.files)

    def records(self) -> Iterator[Sample | RawDataError]:
        for path in self.files:
            language = FILE_PATTERN.fullmatch(path.name).group(1).lower()
            lang = LANGUAGES.get(language)
            if lang is None:
                yield self.error(path, f"unknown language {language!r} in the file name; known: {sorted(LANGUAGES)}")
                continue
            if self.languages is not None and lang not in self.languages:
                continue
            try:
                rows = read_csv(path, REQUIRED, OPTIONAL, single_line=True)
                for row in rows:
                    if row.problem:
                        yield self.error(path, row.problem, row.line)
                    else:
                        yield self._sample(row.values, lang, path, row.line)
            except FileProblem as problem:
                yield self.error(path, str(problem))

    def _sample(self, row: dict[str, str], lang: str, path: Path, line: int) -> Sample | RawDataError:
        case_id = row["mhc_case_id"].strip()
        if not case_id:
            return self.error(path, "empty mhc_case_id", line)
        label = LABELS.get(row["label_gold"].strip().casefold())
        if label is None:
            return self.error(path, f"label_gold {row['label_gold']!r} is not one of {sorted(LABELS)}", line)
        text = row["test_case"].strip()
        if not text:
            return self.error(path, f"empty test_case for {case_id}", line)
        if not row["functionality"].strip():
            return self.error(path, f"empty functionality for {case_id}", line)
        duplicate = self.claim_id(f"mhc/{case_id}", path, line)
        if duplicate:
            return duplicate
        template = (row.get("templ_id") or "").strip()
        meta: dict[str, Any] = {key: (row.get(key) or "").strip() or None for key in OPTIONAL if key not in FLAGS}
        meta["functionality"] = row["functionality"].strip()
        meta["label_annotated"] = _annotations(row.get("label_annotated"))
        votes = _votes(meta["label_annotated"])
        if votes is not None:  # the annotators' votes on the one head (src/crossmod/data/heads.py head_votes)
            meta["head_votes"] = {"hateful": votes}
        meta.update({key: _flag(row.get(key)) for key in FLAGS})
        return Sample(
            id=f"mhc/{case_id}",
            group=f"mhc/{lang}/templ-{template}" if template else f"mhc/{case_id}",
            lang=lang,
            text=text,
            image=None,
            labels={"hateful": label},
            split=None,
            meta=meta,
        )

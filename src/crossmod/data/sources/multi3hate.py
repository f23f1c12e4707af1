"""Multi3Hate: 300 memes in five languages, one binary hate label per annotator culture.

Layout (the study's `data/` folder): `captions/{lang}.csv` (`Meme ID, Template Name, Original
(English), Translation`), `final_annotations.csv` (`Meme ID,US,DE,MX,CN,IN`, 0/1),
`memes/{lang}/{Template Name}/{Meme ID}.jpg`, optionally `raw_annotations.csv` (one row per
annotator vote). Every language version of a meme carries all five culture labels and shares the
fold group `multi3hate/<id>`, so translations never cross folds. ` <sep> ` between the top and
bottom text becomes `caption_separator` (a newline by default).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from crossmod.data.paths import OutsideRoot, resolve_within
from crossmod.data.sample import Sample
from crossmod.data.sources.base import RawDataError, RawSource, check_known
from crossmod.data.sources.images import MAX_IMAGE_BYTES, ImageFinder, load_image
from crossmod.data.sources.readers import FileProblem, clean_id, read_csv

LANGUAGES = ("en", "de", "es", "hi", "zh")
CULTURES = ("US", "DE", "MX", "IN", "CN")
CULTURE_OF_POOL = {**dict(zip(LANGUAGES, CULTURES)), **{c.casefold(): c for c in CULTURES}}  # raw `dataset_language`
SEPARATOR = re.compile(r"\s*<sep>\s*", re.IGNORECASE)
CAPTION_COLUMNS = ["Meme ID", "Template Name", "Translation"]
CAPTION_OPTIONAL = ["Original (English)", "Topic", "Category"]
HATE_VOTES = {
    "1": 1,
    "1.0": 1,
    "true": 1,
    "yes": 1,
    "hate": 1,
    "hateful": 1,
    "hate speech": 1,
    "0": 0,
    "0.0": 0,
    "false": 0,
    "no": 0,
    "non-hate": 0,
    "non-hateful": 0,
    "not hate": 0,
    "non-hate speech": 0,
    "no hate": 0,
}


# the annotator attributes raw_annotations.csv gives (its own column names, "Politcal" sic), by the group name a model
# asks for (`model/objective=annotator_groups by=<name>`); `annotator` is the annotator itself (its User ID)
ATTRIBUTES = {"sex": "Sex", "age": "Age", "education": "Education", "party": "Politcal Party", "ethnicity": "Ethnicity simplified"}
UNSAFE = re.compile(r"[^\w .+/-]")  # a group value is data: no `$`, braces or quotes reach a config (interpolation)


def group_value(grouping: str, value: str) -> str | None:
    """One annotator's group under `grouping`, as a key part: the attribute as written (age by decade: `30s`), its
    characters outside letters, digits, space and `.+/-_` replaced by `_`; None where the release left it empty or
    an age is no number."""
    text = value.strip()
    if not text:
        return None
    if grouping == "age":
        try:
            years = int(float(text))
        except ValueError:
            return None
        return f"{years // 10 * 10}s" if 0 < years < 130 else None
    return UNSAFE.sub("_", text)[:64]


def parse_label(value: str) -> tuple[int | None, str | None]:
    """A culture's label cell: 0 or 1; empty means not annotated (None); anything else is an error."""
    text = value.strip()
    if text == "":
        return None, None
    if text in ("0", "1", "0.0", "1.0"):
        return int(float(text)), None
    return None, f"label {value!r} is not 0 or 1"


class Multi3HateSource(RawSource):
    """Converts Multi3Hate's captions, images and final (majority-vote) annotations."""

    name = "multi3hate"
    version = 3  # 2: each sample carries its culture heads' vote counts (meta.head_votes); 3: and per annotator group (meta.group_votes)

    def __init__(
        self,
        raw_dir: str | Path,
        languages: list[str] | None = None,
        cultures: list[str] = CULTURES,
        caption_separator: str = "\n",
        on_error: str = "raise",
        max_image_bytes: int = MAX_IMAGE_BYTES,
    ) -> None:
        root = Path(raw_dir).expanduser()
        if not (root / "final_annotations.csv").is_file() and (root / "data" / "final_annotations.csv").is_file():
            root = root / "data"  # the repository root was given: its data/ folder is unambiguous
        super().__init__(root, on_error, max_image_bytes)
        check_known(cultures, CULTURES, "Multi3Hate cultures")
        if languages is not None:
            check_known(languages, LANGUAGES, "Multi3Hate language codes")
        self.cultures, self.separator = list(cultures), caption_separator
        self.languages = sorted(languages) if languages is not None else None
        self.annotations_path = self.raw_dir / "final_annotations.csv"
        self.raw_path = self.raw_dir / "raw_annotations.csv"
        if not self.annotations_path.is_file():
            raise FileNotFoundError(f"multi3hate: {self.annotations_path} does not exist; set data.raw_dir to the study's data/ folder")
        self.caption_files = sorted((self.raw_dir / "captions").glob("*.csv"))
        if not self.caption_files:
            raise FileNotFoundError(f"multi3hate: no captions/<lang>.csv files in {self.raw_dir}")
        if self.languages is not None:
            missing = sorted(set(self.languages) - {p.stem for p in self.caption_files})
            if missing:
                raise FileNotFoundError(f"multi3hate: no captions file for languages {missing} in {self.raw_dir / 'captions'}")
        self.images = ImageFinder(self.raw_dir, recursive=True)

    @property
    def heads(self) -> dict[str, dict[str, Any]]:
        return {culture: {"kind": "binary"} for culture in self.cultures}

    def options(self) -> dict[str, Any]:
        return {
            "languages": self.languages,
            "cultures": self.cultures,
            "caption_separator": self.separator,
            "max_image_bytes": self.max_image_bytes,
        }

    def annotation_files(self) -> list[Path]:
        return [self.annotations_path, self.raw_path, *self.caption_files]

    # ------------------------------------------------------------------ conversion
    def records(self) -> Iterator[Sample | RawDataError]:
        annotations: dict[str, dict[str, Any]] = {}
        unusable: dict[str, int] = {}
        yield from self._read_annotations(annotations, unusable)
        for path in self.caption_files:
            lang = path.stem
            if lang not in LANGUAGES:
                yield self.error(path, f"unknown language code {lang!r} (file name); known: {', '.join(LANGUAGES)}")
                continue
            if self.languages is not None and lang not in self.languages:
                continue
            try:
                rows = read_csv(path, CAPTION_COLUMNS, CAPTION_OPTIONAL)
            except FileProblem as problem:
                yield self.error(path, str(problem))
                continue
            captioned: set[str] = set()
            for row in rows:
                if row.problem:
                    yield self.error(path, row.problem, row.line)
                    continue
                yield self._sample(row.values, lang, path, row.line, annotations, unusable, captioned)
            for meme_id, annotation in annotations.items():
                if meme_id not in captioned:
                    yield self.error(
                        self.annotations_path, f"meme id {meme_id} has no caption row in captions/{lang}.csv", annotation["line"]
                    )

    def _read_annotations(self, annotations: dict[str, dict[str, Any]], unusable: dict[str, int]) -> Iterator[RawDataError]:
        path = self.annotations_path
        try:
            rows = read_csv(path, ["Meme ID", *self.cultures], ["Topic", "Category"])
        except FileProblem as problem:
            yield self.error(path, str(problem))
            return
        for row in rows:
            if row.problem:
                yield self.error(path, row.problem, row.line)
                continue
            meme_id = clean_id(row.values["Meme ID"])
            if meme_id is None:
                yield self.error(path, "empty Meme ID", row.line)
                continue
            if meme_id in annotations or meme_id in unusable:
                first = annotations.get(meme_id, {}).get("line") or unusable[meme_id]
                yield self.error(path, f"duplicate Meme ID {meme_id} (first at line {first})", row.line)
                continue
            labels, problems = {}, []
            for culture in self.cultures:
                labels[culture], problem = parse_label(row.values[culture])
                if problem:
                    problems.append(f"column {culture}: {problem}")
            if problems:
                unusable[meme_id] = row.line
                yield self.error(path, f"meme id {meme_id}: " + "; ".join(problems), row.line)
                continue
            extras = {key.lower(): (row.values.get(key) or "").strip() or None for key in ("Topic", "Category") if key in row.values}
            annotations[meme_id] = {"labels": labels, "line": row.line, **extras}

    def _sample(
        self,
        row: dict[str, str],
        lang: str,
        path: Path,
        line: int,
        annotations: dict[str, dict[str, Any]],
        unusable: dict[str, int],
        captioned: set[str],
    ) -> Sample | RawDataError:
        meme_id = clean_id(row["Meme ID"])
        if meme_id is None:
            return self.error(path, "empty Meme ID", line)
        duplicate = self.claim_id(f"multi3hate/{meme_id}/{lang}", path, line)
        if duplicate:
            return duplicate
        captioned.add(meme_id)
        if meme_id in unusable:
            return self.error(
                path, f"meme id {meme_id}: its annotation row (final_annotations.csv line {unusable[meme_id]}) was not usable", line
            )
        annotation = annotations.get(meme_id)
        if annotation is None:
            return self.error(path, f"meme id {meme_id} has no row in final_annotations.csv", line)
        text = self._caption(row.get("Translation"))
        original = self._caption(row.get("Original (English)"))
        if not text and lang == "en":
            text = original
        if not text and not self.text_from_image:
            return self.error(path, f"empty Translation for meme id {meme_id}", line)
        template = row["Template Name"].strip()
        folder = self.raw_dir / "memes" / lang
        try:
            exact = resolve_within(folder, f"{template}/{meme_id}.jpg", "image path from Template Name") if template else None
        except OutsideRoot as error:
            return self.error(path, f"meme id {meme_id}: {error}", line)
        image_path, problem = self.images.find(folder, meme_id, exact=exact)
        image, problem = (None, problem) if problem else load_image(image_path, self.max_image_bytes)
        if problem:
            return self.error(path, f"meme id {meme_id}: {problem}", line)
        votes = self.raw_votes["votes"].get(meme_id)
        head_votes = {culture: list(counts) for culture, counts in self.raw_votes["by_culture"].get(meme_id, {}).items()}
        group_votes = self.raw_votes["by_group"].get(meme_id, {})
        return Sample(
            id=f"multi3hate/{meme_id}/{lang}",
            group=f"multi3hate/{meme_id}",
            lang=lang,
            text=text,
            image=image,
            labels=dict(annotation["labels"]),
            split=None,
            meta={
                "template": template or None,
                "topic": (row.get("Topic") or "").strip() or annotation.get("topic"),
                "category": (row.get("Category") or "").strip() or annotation.get("category"),
                "original_en": original or None,
                "image_file": self.rel(image_path),
                **({"votes": votes} if votes else {}),
                # per culture head: [hate votes, votes] of its annotator pool (what soft_votes trains on, soft metrics score)
                **({"head_votes": head_votes} if head_votes else {}),
                # per culture head: `<grouping>=<value>` → [hate votes, votes] of its annotators in that group
                # (annotator=<User ID>, sex=…, age=30s …): what model/objective=annotator_groups trains on
                **({"group_votes": group_votes} if group_votes else {}),
            },
        )

    def _caption(self, value: str | None) -> str:
        return SEPARATOR.sub(self.separator, value or "").strip()

    # ------------------------------------------------------------------ statistics
    @cached_property
    def raw_votes(self) -> dict[str, Any]:
        """Hate votes from `raw_annotations.csv`, when present (never blocks conversion).

        `votes`: meme → `dataset_language` pool → {hate, total} (kept in each sample's meta);
        `by_culture`: meme → culture → (hate, total) for the selected cultures (en→US, de→DE, es→MX,
        hi→IN, zh→CN); `by_group`: meme → culture → `<grouping>=<value>` → [hate, total] for each annotator and each
        attribute group (`annotator` and `ATTRIBUTES`); `stats`: counts, with every row not used and why, and the votes whose annotator
        left an attribute empty (in no group of it).
        """
        result: dict[str, Any] = {"votes": {}, "by_culture": {}, "by_group": {}, "stats": None}
        if not self.raw_path.is_file():
            return result
        try:
            rows = list(read_csv(self.raw_path, ["Meme ID", "hatespeech"], ["dataset_language", "User ID", *ATTRIBUTES.values()]))
        except FileProblem as problem:
            result["stats"] = {"file": self.rel(self.raw_path), "problem": str(problem)}
            return result
        votes: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: {"hate": 0, "total": 0}))
        by_culture: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        by_group: dict[str, dict[str, dict[str, list[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: [0, 0])))
        ungrouped: Counter[str] = Counter()
        seen: dict[tuple[str, str, str], int] = {}
        users: dict[str, set[str]] = defaultdict(set)
        unparsed: Counter[str] = Counter()
        first_line: dict[str, int] = {}
        unused: Counter[str] = Counter()
        for row in rows:
            value = HATE_VOTES.get(row.values.get("hatespeech", "").strip().casefold()) if row.values else None
            meme_id = clean_id(row.values["Meme ID"]) if row.values else None
            pool = (row.values.get("dataset_language") or "all").strip() if row.values else ""
            user = (row.values.get("User ID") or "").strip() if row.values else ""
            reason = None
            if value is None or meme_id is None:
                reason = row.problem or ("empty Meme ID" if meme_id is None else f"hatespeech {row.values.get('hatespeech')!r}")
            elif user and (pool, user, meme_id) in seen:
                reason = f"second vote of one annotator on one meme (first at line {seen[pool, user, meme_id]})"
            if reason:
                unparsed[reason] += 1
                first_line.setdefault(reason, row.line)
                continue
            if user:
                seen[pool, user, meme_id] = row.line
            votes[meme_id][pool]["hate"] += value
            votes[meme_id][pool]["total"] += 1
            users[pool].add(user)
            culture = CULTURE_OF_POOL.get(pool.casefold())
            if culture in self.cultures:
                by_culture[meme_id][culture][0] += value
                by_culture[meme_id][culture][1] += 1
                raw = {"annotator": user, **{name: row.values.get(column) or "" for name, column in ATTRIBUTES.items()}}
                for grouping, text in raw.items():
                    group = group_value(grouping, text)
                    if group is None:
                        ungrouped[grouping] += 1
                        continue
                    counts = by_group[meme_id][culture][f"{grouping}={group}"]
                    counts[0] += value
                    counts[1] += 1
            else:
                unused[f"dataset_language {pool!r}" + (" (culture not selected)" if culture else " (no culture)")] += 1
        result["votes"] = {meme: {pool: dict(v) for pool, v in pools.items()} for meme, pools in votes.items()}
        result["by_culture"] = {meme: {c: (hate, total) for c, (hate, total) in pools.items()} for meme, pools in by_culture.items()}
        result["by_group"] = {meme: {c: {g: list(v) for g, v in groups.items()} for c, groups in cs.items()} for meme, cs in by_group.items()}
        result["stats"] = {
            "file": self.rel(self.raw_path),
            "rows": len(rows),
            "memes": len(votes),
            "annotators": sum(len(u) for u in users.values()),
            "annotators_by_pool": {pool: len(u) for pool, u in sorted(users.items())},
            "unparsed_rows": sum(unparsed.values()),
            "unparsed_reasons": {reason: {"rows": n, "first_line": first_line[reason]} for reason, n in unparsed.most_common(5)},
            "rows_not_used_for_cultures": dict(unused),
            "votes_without_group": dict(sorted(ungrouped.items())),  # per grouping: its attribute empty (or no number)
        }
        return result

    @cached_property
    def final_labels(self) -> dict[str, dict[str, int | None]]:
        """Meme → culture → final label, for the annotation analysis (`prepare.py`); unusable rows left out."""
        labels: dict[str, dict[str, int | None]] = {}
        for row in read_csv(self.annotations_path, ["Meme ID", *self.cultures]):
            meme_id = clean_id(row.values["Meme ID"]) if row.values else None
            if meme_id is not None and meme_id not in labels:
                parsed = {c: parse_label(row.values[c]) for c in self.cultures}
                if not any(problem for _, problem in parsed.values()):
                    labels[meme_id] = {c: value for c, (value, _) in parsed.items()}
        return labels

    def summary(self) -> dict[str, Any]:
        """What the manifest keeps of the annotations: raw vote counts and every row not used, with why.

        The annotation analysis itself (α, χ², agreement, random groups) is computed from `final_labels`
        and `raw_votes` by the scores in `crossmod.evaluation.annotation_stats` (`prepare.py` adds it)."""
        try:
            labelled = len(self.final_labels)
        except FileProblem:
            return {}
        return {"memes": labelled, "raw_annotations": self.raw_votes["stats"]}

"""Zero-shot Multi3Hate statistics: accuracy per (meme language, culture, prompt) → mean ± std → markers.

The Multi3Hate study (docs/datasets.md) reports, for each meme language and each culture's labels, the mean ±
sample std (ddof=1) of accuracy over the 6 prompts, and a Wilcoxon rank-sum test between cultures' 6
per-prompt accuracies (here the exact one, `crossmod.evaluation.rank_sum`): ``*`` on the best culture when it beats the
lowest (p < .05), ``**`` when it also beats the second best. That is what shows "US alignment": for memes in
language X, whose labels the model matches.

Choices made here (and why):
- Accuracy is over the memes that have a label for that culture; an invalid answer (prediction None)
  counts as wrong, as in the study, and is counted per (language, prompt) so it can be reported.
- The test is :func:`crossmod.evaluation.rank_sum.rank_sum` ``(best, other, alternative="greater")``: the exact Wilcoxon
  rank-sum test, a permutation over all splits of the pooled accuracies (924 at 6 vs 6), because scipy's
  ``ranksums`` (normal approximation) overstates evidence at these sizes and ``mannwhitneyu(method="exact")`` is
  not exact with ties, which accuracies over the same memes often have (why, in that module). One-sided, because
  the claim is directional (best > other); pass ``alternative="two-sided"`` for scipy's two-sided convention. The
  report names the test, and says when too few prompts leave a marker out of reach (below 4 per culture the
  exact one-sided test cannot go below p = .05).
- Prompts with no labelled meme give NaN and are left out of mean/std/test; a (language, culture) cell
  with no labels at all is NaN and takes no part in the ranking, instead of crashing.
- Ties in the mean are broken by culture order (US, DE, MX, IN, CN, then others alphabetically).
Only numpy/scipy are used (pandas is not installed in this project's environment).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crossmod.evaluation.metrics import culture_auroc
from crossmod.evaluation.rank_sum import describe, rank_sum, unreachable_note

CULTURES: tuple[str, ...] = ("US", "DE", "MX", "IN", "CN")
LANGUAGES: tuple[str, ...] = ("en", "de", "es", "hi", "zh")
CULTURE_OF_LANGUAGE: dict[str, str] = {"en": "US", "de": "DE", "es": "MX", "hi": "IN", "zh": "CN"}


def ordered(names: Iterable[str], canonical: tuple[str, ...]) -> tuple[str, ...]:
    names = set(names)
    return tuple(n for n in canonical if n in names) + tuple(sorted(names - set(canonical)))


def _label(value: Any) -> int | None:
    """0/1, or None for a missing label (None, NaN, empty string)."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    label = int(value)
    if label not in (0, 1):
        raise ValueError(f"labels must be 0/1, got {value!r}")
    return label


@dataclass
class AccuracyTable:
    """Counts behind the accuracies; keys are (lang, culture, prompt) and, for answers, (lang, prompt)."""

    langs: tuple[str, ...]
    cultures: tuple[str, ...]
    prompts: tuple[int, ...]
    correct: dict[tuple[str, str, int], int] = field(default_factory=dict)
    labelled: dict[tuple[str, str, int], int] = field(default_factory=dict)
    answers: dict[tuple[str, int], int] = field(default_factory=dict)
    invalid: dict[tuple[str, int], int] = field(default_factory=dict)

    def accuracy(self, lang: str, culture: str, prompt: int) -> float:
        """Share of labelled memes answered correctly; NaN when no meme has this culture's label."""
        n = self.labelled.get((lang, culture, prompt), 0)
        return self.correct.get((lang, culture, prompt), 0) / n if n else float("nan")

    def per_prompt(self, lang: str, culture: str) -> np.ndarray:
        """Accuracies in ``self.prompts`` order (the 6 values the mean, std and test use)."""
        return np.array([self.accuracy(lang, culture, p) for p in self.prompts], dtype=float)


def accuracy_table(records: Iterable[Mapping[str, Any]]) -> AccuracyTable:
    """Tally records {id, lang, prompt, prediction (1/0/None), labels {culture: 0/1/None}} into an AccuracyTable.

    A repeated (id, lang, prompt) raises: counting a meme twice would silently bias the accuracy.
    """
    seen: set[tuple[Any, str, int]] = set()
    langs: set[str] = set()
    cultures: set[str] = set()
    prompts: set[int] = set()
    rows = []
    for record in records:
        lang, prompt = str(record["lang"]), int(record["prompt"])
        key = (record["id"], lang, prompt)
        if key in seen:
            raise ValueError(f"duplicate record for id={key[0]!r} lang={lang!r} prompt={prompt}")
        seen.add(key)
        prediction = _label(record["prediction"])
        labels = {str(c): _label(v) for c, v in (record.get("labels") or {}).items()}
        langs.add(lang)
        prompts.add(prompt)
        cultures.update(labels)
        rows.append((lang, prompt, prediction, labels))

    table = AccuracyTable(ordered(langs, LANGUAGES), ordered(cultures, CULTURES), tuple(sorted(prompts)))
    for lang, prompt, prediction, labels in rows:
        table.answers[lang, prompt] = table.answers.get((lang, prompt), 0) + 1
        table.invalid[lang, prompt] = table.invalid.get((lang, prompt), 0) + (prediction is None)
        for culture, label in labels.items():
            if label is None:
                continue
            table.labelled[lang, culture, prompt] = table.labelled.get((lang, culture, prompt), 0) + 1
            table.correct[lang, culture, prompt] = table.correct.get((lang, culture, prompt), 0) + (prediction == label)
    return table


@dataclass(frozen=True)
class Cell:
    """One (language, culture): per-prompt accuracies and their mean ± sample std over the defined prompts."""

    accuracies: tuple[float, ...]
    mean: float
    std: float

    @property
    def values(self) -> np.ndarray:
        """The finite per-prompt accuracies (what the Wilcoxon test compares)."""
        array = np.array(self.accuracies, dtype=float)
        return array[np.isfinite(array)]


@dataclass(frozen=True)
class LanguageSummary:
    """All cultures for memes in one language, the best culture and its significance marker."""

    cells: dict[str, Cell]
    ranking: tuple[str, ...]  # cultures with a defined mean, best first
    marker: str  # "", "*" (best > lowest) or "**" (also best > second best)
    p_vs_lowest: float
    p_vs_second: float
    answers: int
    invalid: int
    sizes: tuple[int, int] = (0, 0)  # prompts behind best vs lowest: what limits the smallest reachable p

    @property
    def best(self) -> str | None:
        return self.ranking[0] if self.ranking else None


@dataclass(frozen=True)
class Summary:
    """Everything the zero-shot table reports; ``languages`` maps meme language → LanguageSummary."""

    cultures: tuple[str, ...]
    prompts: tuple[int, ...]
    languages: dict[str, LanguageSummary]
    alpha: float
    alternative: str

    @property
    def answers(self) -> int:
        return sum(s.answers for s in self.languages.values())

    @property
    def invalid(self) -> int:
        return sum(s.invalid for s in self.languages.values())

    @property
    def test(self) -> str:
        """The name of the test behind the markers (every comparison at these sizes uses it)."""
        sizes = [s.sizes for s in self.languages.values() if min(s.sizes) > 0]
        return describe(sizes or [(len(self.prompts), len(self.prompts))], self.alternative)

    @property
    def note(self) -> str | None:
        """Which meme languages cannot earn a marker at all with so few prompts (None when all can)."""
        return unreachable_note({lang: s.sizes for lang, s in self.languages.items()}, self.alpha, self.alternative, "prompts")

    def best_counts(self) -> dict[str, int]:
        """How many meme languages each culture's labels are matched best (the "US alignment" count)."""
        counts = dict.fromkeys(self.cultures, 0)
        for language in self.languages.values():
            if language.best is not None:
                counts[language.best] += 1
        return counts


def _cell(accuracies: np.ndarray) -> Cell:
    finite = accuracies[np.isfinite(accuracies)]
    mean = float(finite.mean()) if finite.size else float("nan")
    std = float(finite.std(ddof=1)) if finite.size > 1 else float("nan")
    return Cell(tuple(float(a) for a in accuracies), mean, std)


def _p_greater(better: Cell, other: Cell, alternative: str) -> float:
    if better.values.size == 0 or other.values.size == 0:
        return float("nan")
    return rank_sum(better.values, other.values, alternative=alternative).pvalue


def summarise(table: AccuracyTable, alpha: float = 0.05, alternative: str = "greater") -> Summary:
    """Mean ± std per (language, culture) and the study's ``*``/``**`` markers on each language's best culture."""
    languages = {}
    for lang in table.langs:
        cells = {culture: _cell(table.per_prompt(lang, culture)) for culture in table.cultures}
        order = {culture: i for i, culture in enumerate(table.cultures)}
        ranking = tuple(sorted((c for c in cells if math.isfinite(cells[c].mean)), key=lambda c: (-cells[c].mean, order[c])))
        p_lowest = p_second = float("nan")
        marker = ""
        sizes = (0, 0)
        if len(ranking) >= 2:
            best = cells[ranking[0]]
            sizes = (best.values.size, cells[ranking[-1]].values.size)
            p_lowest = _p_greater(best, cells[ranking[-1]], alternative)
            p_second = _p_greater(best, cells[ranking[1]], alternative)
            if p_lowest < alpha:
                marker = "**" if p_second < alpha else "*"
        answers = sum(table.answers.get((lang, p), 0) for p in table.prompts)
        invalid = sum(table.invalid.get((lang, p), 0) for p in table.prompts)
        languages[lang] = LanguageSummary(cells, ranking, marker, p_lowest, p_second, answers, invalid, sizes)
    return Summary(table.cultures, table.prompts, languages, alpha, alternative)


def markdown(summary: Summary, digits: int = 1) -> str:
    """Rows = meme language, columns = cultures, cells "mean ± std" in % (markers on the best), then invalid answers."""

    def fmt(value: float) -> str:
        return "–" if not math.isfinite(value) else f"{100 * value:.{digits}f}"

    header = ["memes", *summary.cultures, "invalid"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for lang, language in summary.languages.items():
        row = [lang]
        for culture in summary.cultures:
            cell = language.cells[culture]
            text = "–" if not math.isfinite(cell.mean) else f"{fmt(cell.mean)} ± {fmt(cell.std)}"
            row.append(text + (language.marker if culture == language.best else ""))
        row.append(f"{language.invalid}/{language.answers}")
        lines.append("| " + " | ".join(row) + " |")
    note = f" {summary.note}" if summary.note else ""
    lines += [
        "",
        f"Accuracy (%) per culture's labels, mean ± sample std (ddof=1) over {len(summary.prompts)} prompts. "
        f"`*` best > lowest, `**` best > lowest and > second best: {summary.test} over the prompts, "
        f"p < {summary.alpha:g}.{note} Invalid answers (counted as wrong): {summary.invalid} of {summary.answers}.",
    ]
    return "\n".join(lines) + "\n"


def auroc_table(rows: list[dict[str, Any]], cultures: list[str]) -> dict[str, dict[str, float]]:
    """AUROC of P(hate) against each culture's labels, per prompt (all meme languages pooled)."""
    table: dict[str, dict[str, float]] = {}
    for prompt in sorted({r["prompt"] for r in rows}):
        table[str(prompt)] = {}
        for culture in cultures:
            pairs = [
                (r["labels"].get(culture), r["p_hate"]) for r in rows if r["prompt"] == prompt and r["labels"].get(culture) is not None
            ]
            labels = [y for y, _ in pairs]
            table[str(prompt)][culture] = culture_auroc(labels, [p for _, p in pairs])
    return table

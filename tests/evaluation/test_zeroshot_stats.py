"""Zero-shot statistics on synthetic records whose accuracies, invalid counts and markers are known."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from scipy.stats import rankdata, ranksums

from crossmod.evaluation.zeroshot_stats import AccuracyTable, accuracy_table, markdown, summarise

EXACT = "exact one-sided Wilcoxon rank-sum (permutation over all splits)"


def exact_p(x, y, alternative="greater") -> float:
    """Reference exact rank-sum p-value: all C(n+m, n) splits of the pooled values, midranks for ties, one by one."""
    ranks = rankdata(np.concatenate([x, y]))
    observed = ranks[: len(x)].sum()
    sums = np.array([ranks[list(c)].sum() for c in combinations(range(len(ranks)), len(x))])
    greater, less = np.mean(sums >= observed), np.mean(sums <= observed)
    return {"greater": greater, "less": less, "two-sided": min(1.0, 2 * min(greater, less))}[alternative]


PROMPTS = range(6)


def _flip(labels: list[int], every: int) -> list[int]:
    """Labels of a culture disagreeing with `labels` on every `every`-th meme."""
    return [1 - y if i % every == 0 else y for i, y in enumerate(labels)]


def _us_aligned_records(langs=("en", "de", "hi"), n=20):
    rng = np.random.default_rng(0)
    records = []
    for lang in langs:
        us = [int(v) for v in rng.integers(0, 2, n)]
        labels = {"US": us, "DE": _flip(us, 5), "IN": _flip(us, 2)}  # DE agrees on 80 %, IN on 50 %
        for prompt in PROMPTS:
            for i in range(n):
                records.append(
                    {"id": i, "lang": lang, "prompt": prompt, "prediction": us[i], "labels": {c: v[i] for c, v in labels.items()}}
                )
    return records


def _table(accuracies: dict[str, list[float]], lang="en", n=1000) -> AccuracyTable:
    """A table with the given per-prompt accuracies (n labelled memes per culture and prompt)."""
    table = AccuracyTable((lang,), tuple(accuracies), tuple(PROMPTS))
    for culture, values in accuracies.items():
        for prompt, value in zip(PROMPTS, values):
            table.correct[lang, culture, prompt] = round(value * n)
            table.labelled[lang, culture, prompt] = n
    for prompt in PROMPTS:
        table.answers[lang, prompt], table.invalid[lang, prompt] = n, 0
    return table


def test_model_agreeing_with_us_labels_is_us_aligned():
    summary = summarise(accuracy_table(_us_aligned_records()))
    for lang in ("en", "de", "hi"):
        cells = summary.languages[lang].cells
        assert cells["US"].accuracies == (1.0,) * 6
        assert cells["DE"].mean == pytest.approx(0.8) and cells["IN"].mean == pytest.approx(0.5)
        assert summary.languages[lang].best == "US"
        assert summary.languages[lang].ranking == ("US", "DE", "IN")
        assert summary.languages[lang].marker == "**"  # 6 × 1.0 vs 6 × 0.8: complete separation
    assert summary.best_counts() == {"US": 3, "DE": 0, "IN": 0}
    assert summary.cultures == ("US", "DE", "IN") and tuple(summary.languages) == ("en", "de", "hi")


def test_mean_and_std_match_numpy_ddof1():
    n = 10
    labels = [i % 2 for i in range(n)]
    records = [
        {"id": i, "lang": "en", "prompt": p, "prediction": 1 - y if i < p else y, "labels": {"US": y}}  # prompt p: p errors
        for p in PROMPTS
        for i, y in enumerate(labels)
    ]
    cell = summarise(accuracy_table(records)).languages["en"].cells["US"]
    expected = np.array([(n - p) / n for p in PROMPTS])
    np.testing.assert_allclose(cell.accuracies, expected)
    assert cell.mean == pytest.approx(np.mean(expected))
    assert cell.std == pytest.approx(np.std(expected, ddof=1))
    assert cell.std != pytest.approx(np.std(expected))  # not the population std


def test_invalid_predictions_are_wrong_and_counted():
    labels = [1, 0, 1, 0]
    records = []
    for p in PROMPTS:
        for i, y in enumerate(labels):
            prediction = None if i < p % 3 else y  # prompts 0..5 have 0,1,2,0,1,2 invalid answers
            records.append({"id": i, "lang": "de", "prompt": p, "prediction": prediction, "labels": {"DE": y, "US": 1 - y}})
    table = accuracy_table(records)
    assert [table.invalid["de", p] for p in PROMPTS] == [0, 1, 2, 0, 1, 2]
    np.testing.assert_allclose(table.per_prompt("de", "DE"), [1, 0.75, 0.5, 1, 0.75, 0.5])
    np.testing.assert_allclose(table.per_prompt("de", "US"), [0] * 6)  # invalid is wrong for either label
    summary = summarise(table)
    assert (summary.invalid, summary.answers) == (6, 24)
    assert summary.languages["de"].invalid == 6
    assert "6/24" in markdown(summary) and "Invalid answers (counted as wrong): 6 of 24" in markdown(summary)


MARKER_CASES = {
    "clear separation": {"US": [0.90, 0.91, 0.92, 0.93, 0.94, 0.95], "DE": [0.80, 0.81, 0.82, 0.83, 0.84, 0.85], "MX": [0.7] * 6},
    "best ties second": {"US": [0.80, 0.82, 0.84, 0.86, 0.88, 0.90], "DE": [0.79, 0.81, 0.83, 0.85, 0.87, 0.89], "IN": [0.5] * 6},
    "no separation": {"US": [0.7] * 6, "DE": [0.7] * 6, "CN": [0.7] * 6},
    "overlapping": {"US": [0.70, 0.60, 0.72, 0.58, 0.66, 0.64], "DE": [0.65, 0.61, 0.69, 0.60, 0.62, 0.63], "CN": [0.6, 0.7] * 3},
}


@pytest.mark.parametrize("alternative", ["greater", "two-sided"])
@pytest.mark.parametrize("case", MARKER_CASES, ids=list(MARKER_CASES))
def test_markers_follow_the_exact_rank_sum_test(case, alternative):
    accuracies = MARKER_CASES[case]
    language = summarise(_table(accuracies), alternative=alternative).languages["en"]
    means = {c: np.mean(v) for c, v in accuracies.items()}
    order = list(accuracies)
    ranking = sorted(accuracies, key=lambda c: (-means[c], order.index(c)))
    best, second, lowest = ranking[0], ranking[1], ranking[-1]
    p_lowest = exact_p(accuracies[best], accuracies[lowest], alternative)
    p_second = exact_p(accuracies[best], accuracies[second], alternative)
    expected = ("**" if p_second < 0.05 else "*") if p_lowest < 0.05 else ""
    assert language.best == best
    assert language.p_vs_lowest == pytest.approx(p_lowest, rel=1e-9) and language.p_vs_second == pytest.approx(p_second, rel=1e-9)
    assert language.marker == expected


def test_marker_values_of_the_constructed_cases():
    markers = {case: summarise(_table(acc)).languages["en"].marker for case, acc in MARKER_CASES.items()}
    assert markers == {"clear separation": "**", "best ties second": "*", "no separation": "", "overlapping": ""}
    assert "92.5 ± 1.9**" in markdown(summarise(_table(MARKER_CASES["clear separation"])))
    # 6 vs 6 with complete separation: 1 split of C(12, 6) = 924
    assert summarise(_table(MARKER_CASES["clear separation"])).languages["en"].p_vs_lowest == pytest.approx(1 / 924)


def _few_prompts(accuracies: dict[str, list[float]], lang="en", n=1000) -> AccuracyTable:
    prompts = range(len(next(iter(accuracies.values()))))
    table = AccuracyTable((lang,), tuple(accuracies), tuple(prompts))
    for culture, values in accuracies.items():
        for prompt, value in zip(prompts, values):
            table.correct[lang, culture, prompt], table.labelled[lang, culture, prompt] = round(value * n), n
    for prompt in prompts:
        table.answers[lang, prompt], table.invalid[lang, prompt] = n, 0
    return table


def test_three_prompts_cannot_earn_a_marker_and_the_report_says_so():
    # complete separation on 3 prompts: the normal approximation gives p = .025, the exact test 1/20 = .05
    accuracies = {"US": [0.90, 0.91, 0.92], "DE": [0.80, 0.81, 0.82], "MX": [0.70, 0.71, 0.72]}
    assert ranksums(accuracies["US"], accuracies["MX"], alternative="greater").pvalue < 0.05
    summary = summarise(_few_prompts(accuracies))
    language = summary.languages["en"]
    assert language.p_vs_lowest == pytest.approx(1 / 20) and language.marker == ""
    assert summary.test == EXACT
    assert summary.note == (
        "No marker can be earned for en: with 3 prompts the exact one-sided rank-sum test cannot go below p = 0.05 "
        "(markers need ≥ 4 prompts per group for p < 0.05)."
    )
    assert summary.note in markdown(summary)
    # 4 prompts: complete separation reaches 1/70, and the note is gone
    four = summarise(_few_prompts({"US": [0.90, 0.91, 0.92, 0.93], "DE": [0.80, 0.81, 0.82, 0.83], "MX": [0.7] * 4}))
    assert four.languages["en"].p_vs_lowest == pytest.approx(1 / 70) and four.languages["en"].marker == "**"
    assert four.note is None and "No marker can be earned" not in markdown(four)


def test_tied_accuracies_use_the_exact_permutation_not_the_normal_approximation():
    # 4 prompts, ties across cultures: US .8 .8 .8 .7 against MX .7 .7 .6 .6. Midranks: .6 → 1.5, 1.5; .7 → 4, 4, 4;
    # .8 → 7, 7, 7. US's rank sum 25 of a total 36: splits where 4 of the 8 ranks sum ≥ 25 ⇔ the other 4 sum ≤ 11:
    # {1.5, 1.5, 4, 4} (3 choices of the two 4s) = 11 → 3 of C(8, 4) = 70 splits: p = 3/70 = .043.
    accuracies = {"US": [0.8, 0.8, 0.8, 0.7], "MX": [0.7, 0.7, 0.6, 0.6]}
    language = summarise(_few_prompts(accuracies)).languages["en"]
    assert language.p_vs_lowest == pytest.approx(3 / 70) and language.marker == "**"  # second best is the lowest here
    # the same comparison with the 4th US prompt at .6: sum 22.5 → p well above .05, no marker
    language = summarise(_few_prompts({"US": [0.8, 0.8, 0.8, 0.6], "MX": [0.7, 0.7, 0.6, 0.6]})).languages["en"]
    assert language.p_vs_lowest == pytest.approx(exact_p([0.8, 0.8, 0.8, 0.6], [0.7, 0.7, 0.6, 0.6]))
    assert language.p_vs_lowest > 0.05 and language.marker == ""


def test_random_tables_match_the_enumerated_exact_test():
    rng = np.random.default_rng(1)
    for _ in range(50):
        shifts = rng.integers(0, 200, 5)  # accuracies are exact k/1000, as the table stores them
        accuracies = {c: list((rng.integers(500, 800, 6) + shift) / 1000) for c, shift in zip("ABCDE", shifts)}
        language = summarise(_table(accuracies)).languages["en"]
        best, second, lowest = language.ranking[0], language.ranking[1], language.ranking[-1]
        assert best == max(accuracies, key=lambda c: np.mean(accuracies[c]))
        significant = [exact_p(accuracies[best], accuracies[o]) < 0.05 for o in (lowest, second)]
        assert language.marker == ("**" if all(significant) else "*" if significant[0] else "")


def test_missing_labels_are_nan_not_a_crash():
    records = []
    for p in PROMPTS:
        for i in range(4):
            # en memes: CN never labelled (None); ZZ only labels de memes; de memes have no US key at all.
            records.append({"id": i, "lang": "en", "prompt": p, "prediction": i % 2, "labels": {"US": i % 2, "CN": None}})
            records.append({"id": i, "lang": "de", "prompt": p, "prediction": 1, "labels": {"DE": 1, "ZZ": float("nan") if i else 0}})
    summary = summarise(accuracy_table(records))
    assert summary.cultures == ("US", "DE", "CN", "ZZ")
    en, de = summary.languages["en"], summary.languages["de"]
    assert math.isnan(en.cells["CN"].mean) and math.isnan(en.cells["DE"].mean) and math.isnan(de.cells["US"].mean)
    assert en.ranking == ("US",) and en.marker == "" and math.isnan(en.p_vs_lowest)
    assert de.cells["ZZ"].accuracies == (0.0,) * 6 and de.ranking == ("DE", "ZZ")
    text = markdown(summary)
    assert text.splitlines()[0] == "| memes | US | DE | CN | ZZ | invalid |"
    assert "| en | 100.0 ± 0.0 | – | – | – | 0/24 |" in text


def test_a_prompt_without_labels_is_left_out_of_mean_and_std():
    table = _table({"US": [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]})
    del table.labelled["en", "US", 5], table.correct["en", "US", 5]
    cell = summarise(table).languages["en"].cells["US"]
    assert math.isnan(cell.accuracies[5])
    assert cell.mean == pytest.approx(0.7) and cell.std == pytest.approx(np.std([0.9, 0.8, 0.7, 0.6, 0.5], ddof=1))


def test_duplicate_records_are_rejected():
    record = {"id": 1, "lang": "en", "prompt": 0, "prediction": 1, "labels": {"US": 1}}
    with pytest.raises(ValueError, match="duplicate"):
        accuracy_table([record, dict(record)])


def test_markdown_layout():
    text = markdown(summarise(accuracy_table(_us_aligned_records(langs=("zh", "en")))))
    lines = text.splitlines()
    assert lines[:2] == ["| memes | US | DE | IN | invalid |", "|---|---|---|---|---|"]
    assert lines[2].startswith("| en | 100.0 ± 0.0** | 80.0 ± 0.0 | 50.0 ± 0.0 |")  # canonical language order
    assert lines[3].startswith("| zh |")
    assert f"`**` best > lowest and > second best: {EXACT} over the prompts, p < 0.05." in text
    assert "No marker can be earned" not in text  # 6 prompts: markers are reachable


def test_auroc_table_per_prompt_and_culture_by_hand():
    from crossmod.evaluation.zeroshot_stats import auroc_table

    rows = [
        {"prompt": 0, "p_hate": 0.9, "labels": {"US": 1, "DE": 0}},
        {"prompt": 0, "p_hate": 0.2, "labels": {"US": 0, "DE": 1}},
        {"prompt": 0, "p_hate": 0.6, "labels": {"US": 1, "DE": None}},
        {"prompt": 1, "p_hate": 0.5, "labels": {"US": 1, "DE": 1}},
    ]
    table = auroc_table(rows, ["US", "DE"])
    assert table["0"]["US"] == 1.0 and table["0"]["DE"] == 0.0  # US: both positives above the negative; DE reversed
    assert math.isnan(table["1"]["US"])  # one class: undefined, not 0 or 1


def test_comparison_footer_names_each_runs_test_and_repeats_its_note():
    from crossmod.evaluation.zeroshot_comparison import comparison_markdown

    cells = {"en": {"US": {"mean": 0.9, "std": 0.01}, "DE": {"mean": 0.7, "std": 0.01}, "best": "US", "marker": ""}}
    note = "No marker can be earned for en: with 3 prompts the exact one-sided rank-sum test cannot go below p = 0.05 (…)."
    new = {"prompts": [0, 1, 2], "invalid": 0, "answers": 3, "accuracy": cells, "markers": {"test": EXACT, "note": note}}
    old = {"prompts": [0, 1, 2], "invalid": 0, "answers": 3, "accuracy": {"en": dict(cells["en"], marker="*")}}  # no test recorded
    assert f"({EXACT} over the prompts, per row, as each run computed it). a: {note} Invalid" in comparison_markdown({"a": new})
    both = comparison_markdown({"a": new, "b": old})
    assert f"(a: {EXACT}; b: one-sided Wilcoxon rank-sum (normal approximation, scipy ranksums) over the prompts" in both
    assert "| b | en | 90.0 ± 1.0* | 70.0 ± 1.0 | 0/3 |" in both  # the old run's marker is shown as it was computed

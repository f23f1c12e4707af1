"""`dataset_report.{json,md}` and the random-group histogram: the annotation analysis as files a reader opens."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from crossmod.data.cache_files import write_file  # noqa: E402
from crossmod.evaluation.annotation_stats import AnnotationReport, annotation_report  # noqa: E402

REPORT_JSON, REPORT_MD, HISTOGRAM = "dataset_report.json", "dataset_report.md", "dataset_report_random_groups.png"


def write_dataset_report(report: AnnotationReport, out_dir: str | Path, dataset: str) -> list[Path]:
    """Write the JSON (summary + histogram counts), the Markdown page and, with random groups, the PNG."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    data: dict[str, Any] = {"dataset": dataset, **report.summary}
    if report.random_agreements is not None:
        written.append(random_groups_histogram(report, out / HISTOGRAM, dataset))
        edges = agreement_bins(report.random_agreements, report.summary["random_groups"]["memes"])
        counts, _ = np.histogram(report.random_agreements, bins=edges)
        data["random_groups"] = {**data["random_groups"], "histogram": {"counts": counts.tolist(), "edges": edges.tolist()}}
    # through the one writer: a link planted in the report folder is replaced, never written through
    write_file(out / REPORT_JSON, json.dumps(data, indent=1, ensure_ascii=False).encode(), "dataset report", user_folder=True)
    write_file(out / REPORT_MD, report_markdown(report.summary, dataset, HISTOGRAM if written else None).encode(), "dataset report", user_folder=True)
    return [out / REPORT_JSON, out / REPORT_MD, *written]


def agreement_bins(agreements: np.ndarray, memes: int, most: int = 60) -> np.ndarray:
    """Bin edges centred on the values an agreement over `memes` memes can take (k / memes), at most `most` bins."""
    low, high = int(round(agreements.min() * memes)), int(round(agreements.max() * memes))
    step = max(1, -(-(high - low + 1) // most))
    return (np.arange(low, high + step + 1, step) - 0.5) / memes


def random_groups_histogram(report: AnnotationReport, path: Path, dataset: str) -> Path:
    """Distribution of random-group agreement, with each culture pair's agreement and their mean marked."""
    random, groups = report.random_agreements, report.summary["random_groups"]
    at_value: dict[float, list[str]] = {}
    for pair, value in report.summary["pairwise_agreement"].items():
        if value is not None:
            at_value.setdefault(value, []).append(pair)
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.hist(random, bins=agreement_bins(random, groups["memes"]), color="lightsteelblue", label=f"random groups ({len(random):,} draws)")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # head room for the pair labels
    for k, (value, pairs) in enumerate(sorted(at_value.items())):
        ax.axvline(value, color="tab:red", linewidth=1, alpha=0.7)
        height = 0.98 - 0.12 * (k % 3)
        ax.text(
            value, height, " " + ", ".join(pairs), transform=ax.get_xaxis_transform(), rotation=90, fontsize=7, va="top", color="tab:red"
        )
    mean_of_pairs = groups["mean_of_pairs"]["agreement"]
    if mean_of_pairs is not None:
        ax.axvline(mean_of_pairs, color="black", linestyle="--", label=f"mean of culture pairs ({mean_of_pairs:.3f})")
    ax.axvline(groups["mean"], color="tab:blue", linestyle=":", label=f"random mean {groups['mean']:.3f}, σ {groups['std']:.3f}")
    ax.set(xlabel="agreement of majority labels (share of memes)", ylabel="repetitions", title=f"{dataset}: culture pairs vs random groups")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=120, format="png")
    plt.close(fig)
    return write_file(path, buffer.getvalue(), "dataset report figure", user_folder=True)


def report_markdown(summary: dict[str, Any], dataset: str, histogram: str | None) -> str:
    """The report as a Markdown page (numbers from `summary`, the figure linked when present)."""
    cultures = summary["cultures"]
    alpha = summary.get("krippendorff_alpha") or {}
    lines = [f"# {dataset}: annotation report", "", f"{summary['memes']} memes with final labels; cultures {', '.join(cultures)}.", ""]
    lines += [
        "## Per culture",
        "",
        "| culture | hate share | Krippendorff's α (nominal) | memes with votes | votes |",
        "|---|---|---|---|---|",
    ]
    for c in cultures:
        a = alpha.get(c) or {}
        lines.append(f"| {c} | {_pct(summary['hate_share'][c])} | {_num(a.get('alpha'))} | {a.get('memes', '–')} | {a.get('votes', '–')} |")
    if summary.get("votes_note"):
        lines += ["", summary["votes_note"]]
    chi2 = summary["chi2"]
    lines += ["", "## Culture × final label (χ² test of independence)", "", "| culture | non-hate | hate |", "|---|---|---|"]
    lines += [f"| {c} | {row['non_hate']} | {row['hate']} |" for c, row in chi2["table"].items()]
    verdict = f"χ² = {chi2['chi2']:.3f}, dof = {chi2['dof']}, p = {chi2['p']:.3g}" if chi2["chi2"] is not None else chi2["reason"]
    lines += ["", verdict + " (scipy.stats.chi2_contingency)."]
    lines += ["", "## Pairwise agreement of final labels", "", "| | " + " | ".join(cultures) + " |", "|---|" + "---|" * len(cultures)]
    pairs = summary["pairwise_agreement"]
    for a in cultures:
        cells = ["–" if a == b else _pct(pairs.get(f"{a}-{b}", pairs.get(f"{b}-{a}"))) for b in cultures]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    levels = summary["agreement_levels"]
    lines += ["", f"## Cultures agreeing ({levels['memes']} memes labelled by all; {levels['memes_incomplete']} not)", ""]
    lines += ["| largest same-label group | share of memes |", "|---|---|"]
    lines += [f"| {k} of {len(cultures)} | {_pct(share)} |" for k, share in levels["share"].items()]
    lines += ["", *_random_groups_markdown(summary.get("random_groups"), pairs, histogram)]
    return "\n".join(lines) + "\n"


def _random_groups_markdown(groups: dict[str, Any] | None, pairs: dict[str, float | None], histogram: str | None) -> list[str]:
    if not groups:
        return []
    lines = ["## Culture pairs vs random annotator groups", ""]
    how = "disjoint groups" if groups["disjoint"] else "groups drawn independently"
    lines.append(
        f"Per meme, two groups of {groups['group_size']} votes drawn without replacement from all cultures' pooled votes "
        f"({how}); agreement of the groups' majority labels over {groups['memes']} memes; {groups['repetitions']:,} "
        f"repetitions, seed {groups['seed']}. Memes with fewer than {groups['votes_needed']} votes left out: "
        f"{groups['memes_too_few_votes']}."
    )
    if "mean" not in groups:
        return [*lines, "", groups["reason"], ""]
    normal = groups["normaltest"]
    lines += [
        "",
        f"Random agreement: mean {groups['mean']:.4f}, σ {groups['std']:.4f}; D'Agostino–Pearson normality: "
        + (f"statistic {normal['statistic']:.3f}, p = {normal['p']:.3g}." if normal["p"] is not None else "undefined."),
        "",
        "| culture pair | agreement | (agreement − mean) / σ |",
        "|---|---|---|",
    ]
    for pair, sigma in groups["pairs_sigma"].items():
        lines.append(f"| {pair} | {_pct(pairs[pair])} | {_num(sigma, '+.2f')} |")
    mean = groups["mean_of_pairs"]
    lines.append(f"| mean of pairs | {_pct(mean['agreement'])} | {_num(mean['sigma'], '+.2f')} |")
    if histogram:
        lines += ["", f"![random groups]({histogram})"]
    return [*lines, ""]


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "–" if value is None else format(value, fmt)


def annotation_analysis(source: Any) -> AnnotationReport | None:
    """The study's annotation analysis of a source with final labels and per-annotator votes (Multi3Hate), else None."""
    if getattr(source, "final_labels", None) is None:
        return None
    return annotation_report(source.final_labels, source.raw_votes["by_culture"], source.cultures)


def manifest_summary(source: Any) -> dict[str, Any] | None:
    """The annotation analysis's compact numbers for the manifest's summary (data configs wire this as the
    datamodule's `describe`, so `train.py` and `prepare.py` write the same manifest)."""
    report = annotation_analysis(source)
    return None if report is None else report.summary


def write_annotation_report(source: Any, directory: Path) -> list[Path]:
    """`dataset_report.{json,md}` + histogram for a source with per-annotator votes (Multi3Hate); [] otherwise."""
    report = annotation_analysis(source)
    if report is None:
        return []
    return write_dataset_report(report, directory, source.name)

"""Multilingual HateCheck functional report: where a hate classifier fails, per functionality and language.

Inputs are one row per case with its language, functionality, target group, template fields (the
case's `meta` from the MHC shards), the gold label and the model's binary prediction. Reported as the
study does: accuracy per functionality × language; per language F1 of the hateful class (F1-h), of the
non-hateful class (F1-nh) and their macro mean; macro F1 per target group over the cases generated
from an `[IDENT]` template; and per language whether the model over- or under-predicts hate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import f1_score

TEMPLATE_FIELDS = ("case_templ", "gender_male", "gender_female")


def is_ident_case(meta: Mapping[str, Any]) -> bool:
    """Generated from a template with an identity placeholder ([IDENT_P], [male_IDENT_S] …) and a target."""
    return bool(meta.get("target_ident")) and any("IDENT" in str(meta.get(key) or "") for key in TEMPLATE_FIELDS)


def _f1s(y: list[int], p: list[int]) -> dict[str, float]:
    f1_h, f1_nh = f1_score(y, p, pos_label=1, zero_division=0), f1_score(y, p, pos_label=0, zero_division=0)
    return {"f1_h": float(f1_h), "f1_nh": float(f1_nh), "macro_f1": float(f1_score(y, p, average="macro", labels=[0, 1], zero_division=0))}


def functional_report(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """rows: {lang, label (0/1), prediction (0/1), meta: {functionality, target_ident, case_templ …}}."""
    by_cell: dict[tuple[str, str], list[bool]] = defaultdict(list)
    by_lang: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    by_target: dict[tuple[str, str], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for row in rows:
        meta, lang, y, p = row["meta"], row["lang"], int(row["label"]), int(row["prediction"])
        by_cell[(meta["functionality"], lang)].append(y == p)
        by_lang[lang][0].append(y)
        by_lang[lang][1].append(p)
        if is_ident_case(meta):
            by_target[(lang, meta["target_ident"])][0].append(y)
            by_target[(lang, meta["target_ident"])][1].append(p)
    languages = sorted(by_lang)
    functionalities = sorted({f for f, _ in by_cell})
    per_language = {}
    for lang in languages:
        y, p = by_lang[lang]
        gold, predicted = float(np.mean(y)), float(np.mean(p))
        per_language[lang] = {
            **_f1s(y, p),
            "cases": len(y),
            "hateful_share_gold": gold,
            "hateful_share_predicted": predicted,
            "direction": "over-predicts hate" if predicted > gold else "under-predicts hate" if predicted < gold else "balanced",
        }
    return {
        "languages": languages,
        "functionalities": functionalities,
        "accuracy": {
            f: {lang: float(np.mean(by_cell[(f, lang)])) if by_cell.get((f, lang)) else None for lang in languages} for f in functionalities
        },
        "per_language": per_language,
        "per_target": {f"{lang}/{target}": _f1s(*by_target[(lang, target)])["macro_f1"] for lang, target in sorted(by_target)},
        "cases": sum(v["cases"] for v in per_language.values()),
    }


def functional_metrics(report: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """Scalar metrics of a functional report, for loggers: `{prefix}/acc/<functionality>` (mean accuracy over the
    languages with cases of it) and `{prefix}/macro_f1/<lang>`."""
    metrics = {
        f"{prefix}/acc/{f}": sum(v for v in cells.values() if v is not None) / sum(v is not None for v in cells.values())
        for f, cells in report["accuracy"].items()
    }
    metrics.update({f"{prefix}/macro_f1/{lang}": s["macro_f1"] for lang, s in report["per_language"].items()})
    return metrics


def functional_markdown(report: Mapping[str, Any], figure: str | None = None) -> str:
    langs = report["languages"]
    lines = [
        "## Multilingual HateCheck",
        "",
        "| language | F1-h | F1-nh | macro F1 | gold / predicted hateful | direction |",
        "|---|---|---|---|---|---|",
    ]
    for lang in langs:
        s = report["per_language"][lang]
        lines.append(
            f"| {lang} | {s['f1_h']:.3f} | {s['f1_nh']:.3f} | {s['macro_f1']:.3f} | "
            f"{s['hateful_share_gold']:.2f} / {s['hateful_share_predicted']:.2f} | {s['direction']} |"
        )
    lines += [
        "",
        "Accuracy per functionality × language:",
        "",
        "| functionality | " + " | ".join(langs) + " |",
        "|---|" + "---|" * len(langs),
    ]
    for functionality, cells in report["accuracy"].items():
        lines.append(f"| {functionality} | " + " | ".join("–" if cells[lang] is None else f"{cells[lang]:.2f}" for lang in langs) + " |")
    if figure:
        lines += ["", f"![accuracy per functionality]({figure})"]
    return "\n".join(lines) + "\n"


def functionality_bars(report: Mapping[str, Any], path: Path) -> Path:
    """Mean accuracy per functionality over languages, one bar each (hardest first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means = {f: float(np.nanmean([np.nan if v is None else v for v in cells.values()])) for f, cells in report["accuracy"].items()}
    ordered = sorted(means, key=means.get)
    fig, ax = plt.subplots(figsize=(7, 0.25 * len(ordered) + 1))
    ax.barh(ordered, [means[f] for f in ordered])
    ax.set(xlabel="accuracy (mean over languages)", xlim=(0, 1))
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

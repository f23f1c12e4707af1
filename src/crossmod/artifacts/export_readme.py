"""An exported culture's README.md: a model card a person reads before acting on the folder's decisions.

It says what the weights judge (the culture, the labels), what they were trained and selected on (the dataset and its
fingerprint, the fold or splits, the selection rule), which base they sit on (its hub id and revision, or its content
hash), and their held-out numbers beside the baselines fitted on the same memes. The YAML front matter is the Hugging
Face model-card metadata (`library_name`, `base_model`, `tags`), so a hub or a registry shows the same facts. Every line
comes from `culture_card.json`, which stays the machine-readable record.
"""

from __future__ import annotations

import json
import math
from typing import Any

from crossmod.evaluation.summary import shown as words  # a shared run's text, escaped for markdown

BASELINE_NAMES = {"majority": "majority", "tfidf": "TF-IDF + LR", "probe": "linear probe"}


def readme(card: dict[str, Any]) -> str:
    """The README's text (front matter, then the card's sections)."""
    lines = [*_front_matter(card), f"# {words(card['experiment'])}: {words(card['culture'])}", ""]
    lines += [
        f"Scores memes as hateful or not as judged by the `{words(card['culture'])}` annotators (labels {card['label_map']}); "
        f"exported by crossmod from run `{words(card['run'])}`.",
        "",
        "## Trained on",
        *_trained_on(card),
        "",
        "## Base",
        *_base(card),
        "",
        "## Scores",
        *_scores(card),
    ]
    if card["format"] == "peft-lora":
        lines += ["", "## Use", *_use(card)]
    else:
        lines += ["", "## Use", "`crossmod predict adapters=<this folder> inputs=<memes.jsonl>`"]
    return "\n".join(lines) + "\n"


def _front_matter(card: dict[str, Any]) -> list[str]:
    meta: dict[str, Any] = {"library_name": "peft" if card["format"] == "peft-lora" else "crossmod"}
    base = card.get("base_model")
    if isinstance(base, str) and base and not base.startswith(("./", "/")) and "@sha256:" not in base:
        meta["base_model"] = base  # a hub id only: the metadata field names a model a hub can link to
    dataset = (card.get("trained_on") or {}).get("dataset")
    meta["tags"] = ["crossmod", "hate-speech-detection", "memes", f"culture-{card['culture']}", *([dataset] if dataset else [])]
    return ["---", *(f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in meta.items()), "---", ""]


def _trained_on(card: dict[str, Any]) -> list[str]:
    trained = card.get("trained_on") or {}
    fingerprint = trained.get("fingerprint")
    lines = [f"- dataset: `{words(trained.get('dataset'))}`" + (f" (fingerprint `{fingerprint}`)" if fingerprint else "")]
    if trained.get("fold") is not None:
        lines.append(
            f"- split: fold {trained['fold']} of {trained.get('num_folds')} (fold seed {trained.get('fold_seed')}): trained on "
            "the other folds; the held-out fold is the test stage below"
        )
    else:
        lines.append(
            f"- split: the dataset's own: train {trained.get('train_splits')}, selection {trained.get('val_splits')}, "
            f"test {trained.get('test_splits')}"
        )
    selection = card.get("selection") or {}
    rule = trained.get("selection_rule") or selection.get("rule")
    chosen = f"; weights: `{words(selection.get('weights'))}`" if selection.get("weights") else ""
    monitor = f" by `{words(selection['monitor'])}` ({words(selection.get('mode'))})" if selection.get("monitor") else ""
    lines.append(f"- selection rule: `{words(rule)}`{monitor}{chosen}; the test memes were never seen by it")
    if trained.get("manifest"):
        lines.append(f"- the fold assignment: `{trained['manifest']}` beside this card")
    return lines


def _base(card: dict[str, Any]) -> list[str]:
    revision = card.get("base_revision")
    lines = [
        f"- family: `{card['family']}` ({card['format']})",
        f"- base model: `{card['base_model']}`" + (f", revision `{revision}`" if revision else ""),
    ]
    for base in card.get("base_provenance") or []:
        if base.get("hub_id"):
            lines.append(f"- `{', '.join(base['keys'])}`: `{base['hub_id']}` at revision `{base.get('revision')}`")
        elif base.get("sha256"):
            lines.append(f"- `{', '.join(base['keys'])}`: `{base['named']}` (content SHA-256 `{base['sha256']}`)")
    return lines


def _scores(card: dict[str, Any]) -> list[str]:
    names = metric_names(card)
    lines = ["| stage | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for stage, values in card["metrics"].items():
        if isinstance(values, dict) and values:
            lines.append(f"| {stage} | " + " | ".join(metric_text(values.get(m)) for m in names) + " |")
    for kind, row in (card.get("baselines") or {}).items():
        values = row.get("test")
        if isinstance(values, dict) and values:
            lines.append(f"| test, {BASELINE_NAMES.get(kind, kind)} | " + " | ".join(metric_text(values.get(m)) for m in names) + " |")
    lines += ["", "test = the held-out memes; val = the memes the weights were selected on."]
    if card.get("baselines"):
        lines.append("The baselines were fitted on the same training memes and scored on the same test memes: " + "; ".join(
            f"{BASELINE_NAMES.get(kind, kind)}: {words(row.get('rule'))}" for kind, row in card["baselines"].items()
        ) + ".")  # fmt: skip
    if card.get("scored_by"):
        lines += ["", f"Scored by {card['scored_by']}."]
    run = card.get("run_metrics")
    if run:
        lines.append(
            f"The run's own scores ({run['scored_by']} rule, selected checkpoint): "
            + ", ".join(f"{stage} AUROC {metric_text((run.get(stage) or {}).get('auroc'))}" for stage in ("val", "test"))
        )
    if card["metrics_per_fold"]:
        lines += [
            "",
            "Per fold (held-out fold, test, each fold run's own scoring rule): "
            + ", ".join(f"fold {k}: AUROC {metric_text((v or {}).get('auroc'))}" for k, v in card["metrics_per_fold"].items()),
        ]
    return lines


def _use(card: dict[str, Any]) -> list[str]:
    base = card["base_model"]
    loaded = f"<this folder>/{base[2:]}" if isinstance(base, str) and base.startswith("./") else str(base)
    return [
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForImageTextToText",
        f"base = AutoModelForImageTextToText.from_pretrained({loaded!r})",
        "model = PeftModel.from_pretrained(base, '<this folder>')",
        "```",
        "or with crossmod: `crossmod predict adapters=<this folder> inputs=<memes.jsonl>`",
    ]


def metric_names(card: dict[str, Any]) -> list[str]:
    """The table's columns: the metrics of the first stage that has any (a run without selection memes has no val)."""
    return sorted(next((v for v in card["metrics"].values() if isinstance(v, dict) and v), {}))


def metric_text(value: Any) -> str:
    """A metric as the README shows it: four decimals, or `undefined` (None or NaN: AUROC of a one-class split)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return "undefined"
    return f"{value:.4f}"

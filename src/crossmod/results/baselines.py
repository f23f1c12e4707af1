"""What a run measures before it trains, on the memes it trains and is scored on: the baselines its numbers stand
beside (crossmod.evaluation.baselines), and its captions' token lengths against the tokenizer's cut.

The frozen-encoder probe embeds every meme once with the encoder as loaded (a text-only model whose encoder is
pretrained); under `model.head_init=probe` (LP-FT, Kumar et al., ICLR 2022) the head layers start from that probe, so
fine-tuning starts where the linear probe ended. Written to the run's `baselines.json` (read by the training table, the
fold result and `crossmod report cv`).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info

from crossmod.artifacts.retrieval_db import embed_records
from crossmod.data.cache_files import write_file
from crossmod.data.heads import Head
from crossmod.evaluation.baselines import Stage, head_weights, logistic_row, majority_row, standardized, tfidf_features
from crossmod.evaluation.summary import json_safe
from crossmod.runtime.resolvers import random_start
from crossmod.runtime.user_errors import UserError

FILENAME = "baselines.json"
HEAD_INITS = ("random", "probe")


def _labels(records: list[dict[str, Any]], heads: dict[str, Head]) -> dict[str, torch.Tensor]:
    return {name: head.labels([r["labels"].get(name) for r in records]) for name, head in heads.items()}


def caption_lengths(tokenizer: Any, texts: list[str], max_length: int) -> dict[str, Any]:
    """Token counts of the captions as the tokenizer sees them (special tokens included), and how many the
    preprocessor's `max_length` cuts."""
    lengths = np.array([len(ids) for ids in tokenizer(texts, truncation=False, verbose=False)["input_ids"]] or [0])
    return {
        "max_length": int(max_length),
        "captions": len(texts),
        "median": float(np.median(lengths)),
        "p95": float(np.percentile(lengths, 95)),
        "max": int(lengths.max()),
        "truncated": int((lengths > max_length).sum()) if texts else 0,
    }


def languages(model: Any, langs: list[str | None]) -> dict[str, Any]:
    """The captions' languages against those the text encoder's model card declares (`language:`): an encoder trained
    on English only, fine-tuned on German captions, is said so, and the TF-IDF row beside it shows what the words
    alone give. `encoder` is None where the encoder's folder declares none (or it is a hub id: nothing is fetched)."""
    from crossmod.artifacts.model_cards import card_languages

    counts = dict(Counter(lang or "unknown" for lang in langs))
    source = (model.hparams.get("text") or {}).get("name_or_path")
    declared = card_languages(Path(source)) if isinstance(source, str) and Path(source).is_dir() else None
    result: dict[str, Any] = {"captions": counts, "encoder": declared}
    if declared:
        outside = {lang: n for lang, n in sorted(counts.items()) if lang not in declared}
        result["outside"] = outside
        if outside:
            shown = ", ".join(f"{lang} {n}" for lang, n in outside.items())
            result["note"] = (
                f"the text encoder's card declares {declared} only; {sum(outside.values())} of {len(langs)} captions are in "
                f"other languages ({shown}): compare its rows with TF-IDF+LR, which reads the words of any language"
            )
    return result


def probes_encoder(model: Any) -> bool:
    """A text-only model whose encoder starts pretrained: the runs that get a frozen-encoder probe row (and may start
    their heads from it)."""
    text = model.hparams.get("text") or {}
    fusion = (model.hparams.get("fusion") or {}).get("_target_", "")
    return fusion.endswith("fusion.TextOnly") and bool(text.get("name_or_path")) and not random_start(text["name_or_path"])


def compute(datamodule: Any, model: Any, device: torch.device, seed: int, probe: bool) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The baselines' rows (val = the selection split, test = the held-out memes), the caption lengths, and the probe's
    fitted models with the feature scaling (None without a probe)."""
    heads = model.heads
    records = {stage: datamodule.stage_records(stage) for stage in ("train", "val", "test")}
    stages = {stage: rows for stage, rows in records.items() if rows}
    labels = {stage: _labels(rows, heads) for stage, rows in stages.items()}
    scored = [stage for stage in ("val", "test") if stage in stages]
    dummy = {stage: Stage(np.zeros((len(rows), 1)), labels[stage]) for stage, rows in stages.items()}
    rows: dict[str, Any] = {"majority": majority_row(dummy["train"], {s: dummy[s] for s in scored}, heads)}
    texts = {stage: [r.get("text") or "" for r in rows] for stage, rows in stages.items()}
    result: dict[str, Any] = {"memes": {stage: len(rows) for stage, rows in records.items()}, "rows": rows}
    tokenizer = getattr(model.preprocessor, "tokenizer", None)
    if tokenizer is not None:
        result["caption_tokens"] = caption_lengths(tokenizer, [t for s in stages for t in texts[s]], model.preprocessor.max_length)
    result["languages"] = languages(model, [r.get("lang") for rows in stages.values() for r in rows])
    if result["languages"].get("note"):
        rank_zero_info(f"Languages: {result['languages']['note']}")
    if any(texts["train"]):
        rank_zero_info(f"Baselines: TF-IDF + logistic regression on {len(texts['train'])} training memes")
        features = dict(zip(stages, tfidf_features(texts["train"], *(texts[s] for s in stages if s != "train"))))
        row, _ = logistic_row("tfidf", Stage(features["train"], labels["train"]), _stage(features, labels, "val"),
                              {s: Stage(features[s], labels[s]) for s in scored}, heads, seed)  # fmt: skip
        rows["tfidf"] = row
    if not probe:
        return result, None
    rank_zero_info(f"Baselines: the frozen encoder embeds {sum(len(r) for r in stages.values())} memes once (linear probe)")
    batch = datamodule.streaming.eval_batch_size or datamodule.streaming.batch_size
    raw = {stage: embed_records(model, rows, batch, device).numpy() for stage, rows in stages.items()}
    scaled, mean, std = standardized(raw["train"], *(raw[s] for s in stages if s != "train"))
    features = dict(zip(stages, scaled))
    row, models = logistic_row("probe", Stage(features["train"], labels["train"]), _stage(features, labels, "val"),
                               {s: Stage(features[s], labels[s]) for s in scored}, heads, seed)  # fmt: skip
    rows["probe"] = row
    return result, {"models": models, "mean": mean, "std": std}


def _stage(features: dict[str, Any], labels: dict[str, Any], stage: str) -> Stage | None:
    return Stage(features[stage], labels[stage]) if stage in features else None


def start_heads_from_probe(model: Any, probe: dict[str, Any]) -> None:
    """LP-FT's first step: the head layers become the probe's logistic regressions (logits = their decision functions)."""
    layers = model.head_layers
    with torch.no_grad():
        for name, head in model.heads.items():
            weight, bias = head_weights(probe["models"][name], head, probe["mean"], probe["std"])
            rows = layers.rows(name)
            layers.linear.weight[rows] = weight.to(layers.linear.weight)
            layers.linear.bias[rows] = bias.to(layers.linear.bias)


def prepare(cfg: Any, datamodule: Any, model: Any, trainer: L.Trainer, run_dir: Path) -> dict[str, Any] | None:
    """Before fit: the baselines of this run's memes (written to `baselines.json` on rank 0) and, under
    `model.head_init=probe`, the head layers started from the probe. None where the run asks for none."""
    head_init = model.hparams.get("head_init", "random")
    if head_init not in HEAD_INITS:
        raise ValueError(f"model.head_init must be one of {HEAD_INITS}, got {head_init!r}")
    probe = probes_encoder(model)
    if head_init == "probe" and not probe:
        raise ValueError(
            "model.head_init=probe (LP-FT) starts the heads from a linear probe of a pretrained text encoder: it needs "
            "model=text with a pretrained model.text.name_or_path (the tiny random encoders have nothing to probe)"
        )
    if not cfg.get("baselines", True) and head_init == "random":
        return None
    from crossmod.models.sharding import is_zero3

    if is_zero3(trainer.strategy):
        rank_zero_info("Baselines: skipped under ZeRO-3 (the probe would build the model outside its partitions)")
        return None
    datamodule.prepare_data()
    datamodule.setup("fit")
    if probe:  # the probe embeds with the encoder as loaded; every other model is built by Lightning, inside its strategy
        model.configure_model()
    result, fitted = compute(datamodule, model, trainer.strategy.root_device, int(cfg.seed), probe)
    if head_init == "probe" and fitted is not None:
        start_heads_from_probe(model, fitted)
        result["head_init"] = "the head layers started from the frozen-encoder probe (LP-FT)"
    _warn_truncation(result.get("caption_tokens"))
    if trainer.is_global_zero:
        write_file(run_dir / FILENAME, json.dumps(json_safe(result), allow_nan=False, indent=1).encode(), "baselines", user_folder=True)
    return result


def _warn_truncation(lengths: dict[str, Any] | None) -> None:
    if lengths and lengths["truncated"]:
        rank_zero_info(
            f"Captions: {lengths['truncated']} of {lengths['captions']} are longer than model.preprocessor.max_length="
            f"{lengths['max_length']} tokens and are cut (longest {lengths['max']}, 95th percentile {lengths['p95']:.0f})"
        )


MAX_BYTES = 4 << 20  # a baselines.json is a few kB: a larger one is not crossmod's


class BaselinesFileError(UserError, ValueError):
    """A run folder's baselines.json that crossmod did not write: named, with what is wrong, never half-used."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem, "remove the file (the run's numbers do not depend on it) or re-run the training")


def read(run_dir: Path) -> dict[str, Any] | None:
    """A run's `baselines.json`, checked (a run folder may come from someone else), or None where it has none. A link
    is refused: the run's own file or nothing."""
    path = Path(run_dir) / FILENAME
    if path.is_symlink():
        raise BaselinesFileError(f"{path} is a symbolic link: a run's baselines are its own file; remove the link")
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_BYTES:
        raise BaselinesFileError(f"{path} holds {path.stat().st_size} bytes, more than any baselines file crossmod writes")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise BaselinesFileError(f"{path}: not JSON ({type(error).__name__})") from None
    return checked(data, str(path))


SCORE_SLACK = 1e-6  # float32 metrics land a rounding step outside [0, 1] (an AUROC of 1.0000001)


def _score(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool) and -SCORE_SLACK <= value <= 1.0 + SCORE_SLACK)


def checked(data: Any, where: str) -> dict[str, Any]:
    """The structure every reader relies on: `memes` (stage → count), `rows` (kind → name, rule, and per stage head →
    metric → a score in [0, 1] or null)."""
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict) or not isinstance(data.get("memes"), dict):
        raise BaselinesFileError(f"{where}: needs the objects `rows` and `memes`")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data["memes"].values()):
        raise BaselinesFileError(f"{where}: memes holds a count that is not a non-negative integer")
    for kind, row in data["rows"].items():
        if not isinstance(row, dict) or not isinstance(row.get("name"), str) or not isinstance(row.get("rule"), str):
            raise BaselinesFileError(f"{where}: rows.{kind} needs a name and a rule (strings)")
        for stage in ("val", "test"):
            table = row.get(stage, {})
            good = isinstance(table, dict) and all(isinstance(s, dict) and all(_score(v) for v in s.values()) for s in table.values())
            if not good:
                raise BaselinesFileError(f"{where}: rows.{kind}.{stage} is not head → metric → a score in [0, 1]")
    found = data.get("languages")
    if found is not None and not (
        isinstance(found, dict) and isinstance(found.get("note", ""), str) and len(found.get("note", "")) <= MAX_NOTE
    ):
        raise BaselinesFileError(f"{where}: languages must be an object whose note is a string of at most {MAX_NOTE} characters")
    return data


MAX_NOTE = 1000  # the languages note crossmod writes is one sentence

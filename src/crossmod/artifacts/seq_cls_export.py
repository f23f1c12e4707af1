"""`crossmod export run=… format=hf_seq_cls`: a VLM run as one Transformers sequence-classification folder that
Transformers loads with its own class (`<Family>ForSequenceClassification`, no remote code) and serving runtimes read
as a classifier: the LoRA merged into the base, the culture heads as the `score` layer (one row per culture,
`num_labels` = cultures, `id2label` = their names, `problem_type` = multi-label: a sigmoid per culture).

Transformers' `score` has no bias, while crossmod's heads do: each culture's bias travels in `crossmod_card.json`
(`score_bias`), beside the calibration map and the policy thresholds, and a culture's probability is
`sigmoid(logits[culture] + score_bias[culture])`, which a test checks against crossmod's own on the same inputs.
Only families whose Transformers release has a sequence-classification class that reads images export this way
(Gemma 3 in the pinned release); for the others the export names the format that serves them (the culture folders).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from crossmod.artifacts.adapter_folder import ExportError
from crossmod.artifacts.culture_folders import culture_baselines, culture_calibration, culture_policy, staged_folder, trained_on
from crossmod.models.backbone import Generative
from crossmod.models.heads import GroupHeadLayers
from crossmod.models.module import MemeClassifier
from crossmod.runtime.redaction import redact

CARD = "crossmod_card.json"
FIX = "export the culture folders instead (crossmod export run=<run dir>), which crossmod predict and crossmod serve load"


def seq_cls_class(base: Any) -> type:
    """Transformers' sequence-classification class for the base's family (`Gemma3ForConditionalGeneration` →
    `Gemma3ForSequenceClassification`), if the release has one that takes images."""
    import inspect

    import transformers

    prefix = type(base).__name__.removesuffix("ForConditionalGeneration")
    found = getattr(transformers, f"{prefix}ForSequenceClassification", None)
    if found is None or "pixel_values" not in inspect.signature(found.forward).parameters:
        raise ExportError(
            f"format=hf_seq_cls: Transformers {transformers.__version__} has no {prefix}ForSequenceClassification that reads images, "
            "so no runtime would load this family as a classifier",
            FIX,
        )
    return found


def _check(model: MemeClassifier) -> None:
    backbone = model.backbone
    if not isinstance(backbone, Generative) or getattr(backbone, "mode", None) != "head" or model.head_layers is None:
        raise ExportError("format=hf_seq_cls exports a VLM classifier whose culture heads read the last token (model.fusion.mode=head)", FIX)
    if isinstance(model.head_layers, GroupHeadLayers) or any(not head.is_binary for head in model.heads.values()):
        raise ExportError("format=hf_seq_cls holds one sigmoid per culture: every head binary, one row each (not annotator-group heads)", FIX)
    if model.scoring.name != "head":
        raise ExportError(f"format=hf_seq_cls scores with the heads; this run scores by {model.scoring.name}", FIX)


def export_seq_cls(model: MemeClassifier, info: dict[str, Any], run_dir: Path, out: Path) -> Path:
    """Write the folder (under a fresh name beside `out`, renamed into place once whole)."""
    _check(model)
    backbone = model.backbone
    base = backbone.base_model()  # type: ignore[union-attr]
    cls = seq_cls_class(base)
    merged = copy.deepcopy(backbone.model).merge_and_unload() if hasattr(backbone.model, "peft_config") else copy.deepcopy(base)  # type: ignore[union-attr]
    cultures = list(model.heads)
    config = copy.deepcopy(merged.config)
    config.architectures = [cls.__name__]
    config.num_labels = len(cultures)
    config.id2label = dict(enumerate(cultures))
    config.label2id = {name: k for k, name in enumerate(cultures)}
    config.problem_type = "multi_label_classification"
    tokenizer = getattr(model.preprocessor.processor, "tokenizer", None)
    config.get_text_config().pad_token_id = tokenizer.pad_token_id if tokenizer is not None else None
    classifier = cls(config).to(dtype=next(merged.parameters()).dtype)
    missing, unexpected = classifier.model.load_state_dict(merged.model.state_dict(), strict=False)
    if missing or unexpected:
        raise ExportError(f"format=hf_seq_cls: the merged base does not fit {cls.__name__} (missing {missing[:3]}, unexpected {unexpected[:3]})", FIX)
    linear = model.head_layers.linear
    with torch.no_grad():
        classifier.score.weight.copy_(linear.weight.detach().to(classifier.score.weight.dtype))
    bias = dict(zip(cultures, linear.bias.detach().float().tolist(), strict=True))
    metrics = info["metrics"]
    card = {
        "format": "hf_seq_cls",
        "architecture": cls.__name__,
        "labels": cultures,
        "probability": "sigmoid(logits[:, k] + score_bias[labels[k]]): Transformers' score layer has no bias; crossmod's heads do",
        "score_bias": bias,
        "prompt": redact(json.loads(json.dumps(model.hparams.get("prompt"), default=str))),
        "experiment": metrics.get("experiment"),
        "run": run_dir.name,
        "metrics": {culture: {stage: metrics["best"].get(stage, {}).get(culture) for stage in ("val", "test")} for culture in cultures},
        "baselines": {culture: culture_baselines(metrics.get("baselines"), culture) for culture in cultures},
        "calibration": {culture: culture_calibration(metrics.get("calibration"), culture) for culture in cultures},
        "policy": {culture: culture_policy(metrics.get("policy"), culture) for culture in cultures},
        "trained_on": trained_on(run_dir, metrics, info["config"]),
    }

    def write(folder: Path) -> None:
        classifier.save_pretrained(folder, safe_serialization=True)
        model.preprocessor.processor.save_pretrained(folder)
        (folder / CARD).write_text(json.dumps(card, indent=1, ensure_ascii=False, default=str))

    return staged_folder(out, write)

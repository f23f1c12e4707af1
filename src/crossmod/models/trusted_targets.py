"""Configs read from files that someone else may have written are data, never recipes.

An exported culture folder (`model_config.json`, `culture_card.json`), a Lightning checkpoint
(`hyper_parameters`) and a run's `config.yaml` name the classes a model is rebuilt from. Hydra would
call any importable callable named there (`builtins.exec`, `os.system`, `AutoConfig.from_pretrained`
with `trust_remote_code` on a folder that ships Python), so before anything is built from such a
file every `_target_` in it must be one of crossmod's own model parts or a known optimizer/schedule,
remote code must stay off, and no value may be an interpolation (resolvers run code as well).
Configs the user composes from `configs/` with Hydra are the user's own and are not checked here.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

MODEL_ROOT = "crossmod.models.module.MemeClassifier"

# Everything configs/model/*.yaml and the experiments build, plus the usual optimizers and schedules.
TRUSTED_TARGETS = frozenset(
    {
        MODEL_ROOT,
        # families (fusions)
        "crossmod.models.fusion.TextOnly",
        "crossmod.models.fusion.ImageOnly",
        "crossmod.models.fusion.ConcatFusion",
        "crossmod.models.fusion.LateFusion",
        "crossmod.models.fusion.EarlyFusion",
        "crossmod.models.clip_fusion.CLIPFusion",
        "crossmod.models.visual_bert.VisualBertFusion",
        "crossmod.models.vlm.classifier.VLMClassifier",
        "crossmod.models.vlm.tag_generator.TagGenerator",  # the tag generator's module (a MemeClassifier that writes tags)
        # backbones and preprocessors
        "crossmod.models.backbones.text.HFTextEncoder",
        "crossmod.models.backbones.image.TimmImageEncoder",
        "crossmod.models.preprocess.MemePreprocessor",
        "crossmod.models.vlm.preprocess.VLMPreprocessor",
        "crossmod.models.vlm.tag_preprocess.TagPreprocessor",
        # what training minimises and how a meme is scored (configs/model/objective, configs/model/scoring)
        "crossmod.models.objectives.CrossEntropy",
        "crossmod.models.objectives.RGCL",
        "crossmod.models.objectives.SoftVotes",
        "crossmod.models.objectives.AnnotatorGroups",
        "crossmod.models.scoring_rules.HeadScores",
        "crossmod.models.scoring_rules.RetrievalVote",
        # optimizers and learning-rate schedules
        "torch.optim.AdamW",
        "torch.optim.Adam",
        "torch.optim.SGD",
        "transformers.get_constant_schedule_with_warmup",
        "transformers.get_cosine_schedule_with_warmup",
        "transformers.get_linear_schedule_with_warmup",
    }
)
# What a run's `config.yaml` builds its data from (a retrieval export reads the run's training memes again).
DATA_ROOT = "crossmod.data.memes.MemeDataModule"
DATA_TARGETS = frozenset(
    {
        DATA_ROOT,
        "crossmod.data.synthetic.SyntheticMemeSource",
        "crossmod.data.sources.hateful_memes.HatefulMemesSource",
        "crossmod.data.sources.memebridge.MemeBridgeSource",
        "crossmod.data.sources.mhc.MHCSource",
        "crossmod.data.sources.multi3hate.Multi3HateSource",
        "crossmod.data.sources.toxictags.ToxicTagsSource",
        "crossmod.data.sources.jsonl_memes.JsonlMemeSource",
        # what a data config's `describe` adds to the manifest (crossmod's own summaries of a source, pure functions)
        "crossmod.evaluation.dataset_report.manifest_summary",
    }
)
# Hydra's own keys; any other key starting with `_` (Lightning's `_instantiator`, `_class_path`) is refused.
INSTANTIATE_KEYS = frozenset({"_target_", "_args_", "_recursive_", "_convert_", "_partial_"})
# Attention implementations are chosen by name; a hub name ("org/kernels") would fetch and run code.
ATTENTION_IMPLEMENTATIONS = frozenset({"auto", "eager", "sdpa", "flash_attention_2", "flash_attention_3"})
CHECKPOINT_HPARAM_KEYS = ("hyper_parameters", "hparams", "module_arguments")  # the keys Lightning reads


class UntrustedConfigError(ValueError):
    """A file asked crossmod to build or run something that crossmod never builds from files."""


def _walk(node: Any, where: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, key, value) of every entry, depth first, lists included (`_args_` among them)."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = f"{where}.{key}" if where else str(key)
            yield path, key, value
            yield from _walk(value, path)
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            path = f"{where}[{index}]"
            yield path, None, value
            yield from _walk(value, path)


def _refusal(key: Any, value: Any, targets: frozenset[str] = TRUSTED_TARGETS) -> str | None:
    """Why this entry may not come from a file, or None."""
    if key == "_target_" and not (isinstance(value, str) and value in targets):
        kind = "data modules or sources" if targets is DATA_TARGETS else "model parts, optimizers or schedules"
        return f"_target_ {value!r} is not one of crossmod's {kind}"
    if isinstance(key, str) and key.startswith("_") and key not in INSTANTIATE_KEYS:
        return f"key {key!r} is not one crossmod writes (it would change how the model is built)"
    if key == "trust_remote_code" and value not in (False, None):
        return "trust_remote_code would run Python shipped with a model; it is never taken from a file"
    if key == "attn_implementation" and value not in ATTENTION_IMPLEMENTATIONS:
        return f"attn_implementation {value!r} is not one of {sorted(ATTENTION_IMPLEMENTATIONS)}"
    if isinstance(value, str) and "${" in value:
        return f"interpolation {value!r} would be resolved (resolvers run code); files hold resolved values"
    return None


def check_trusted(config: Any, source: str | Path, root: str | None = None, targets: frozenset[str] = TRUSTED_TARGETS) -> None:
    """Raise UntrustedConfigError naming `source`, the place in it and the refused value.

    `root`: the `_target_` the whole config must have (the model class), when it has one.
    """
    if root is not None:
        target = config.get("_target_") if isinstance(config, Mapping) else None
        if target != root:
            raise UntrustedConfigError(f"{source}: refused _target_ {target!r} at the top: a config here builds {root}")
    for where, key, value in _walk(config):
        reason = _refusal(key, value, targets)
        if reason:
            raise UntrustedConfigError(
                f"{source}: refused at {where}: {reason}. Files crossmod loads (exported cultures, checkpoints, "
                "run configs) are data; build other parts from your own configs/ with crossmod train"
            )


def check_checkpoint(path: str | Path) -> dict[str, Any]:
    """A Lightning checkpoint's hyperparameters, checked before Lightning builds a model from them.

    The file is read as plain data (`weights_only=True`, memory-mapped, so tensors are not read).
    """
    path = Path(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception as error:  # pickle.UnpicklingError for code, RuntimeError/OSError for broken files
        raise UntrustedConfigError(f"{path}: not loadable as plain data (torch.load with weights_only=True): {error}") from error
    if not isinstance(checkpoint, Mapping):
        raise UntrustedConfigError(f"{path}: not a Lightning checkpoint (a {type(checkpoint).__name__}, not a dict)")
    for key in CHECKPOINT_HPARAM_KEYS:
        if key in checkpoint:
            check_trusted(checkpoint[key], f"{path} [{key}]")
    hparams = checkpoint.get(CHECKPOINT_HPARAM_KEYS[0])
    return dict(hparams) if isinstance(hparams, Mapping) else {}

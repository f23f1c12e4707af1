"""What each entry point checks before it builds anything (`crossmod.runtime.user_errors.entry_point(check)`).

Only what a user causes and can fix, from the config and the folders it names, cheaply: the recipe is one
this program runs (`runs_with`), no value the job reads is left `???`, the raw and shard folders exist (and a
raw folder has the layout its source reads), a fold run's fold is in range, and training without a fold uses
a dataset that has a validation split. Each problem is a `UserError` naming the key and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from crossmod.runtime.user_errors import UserError, error_chain, require
from crossmod.runtime.value_ranges import check_ranges

Check = Callable[[DictConfig], None]
TRAIN = "crossmod train"


# ------------------------------------------------------------------------------------------ pieces
# What an optional part needs, the extra that brings it (setup.cfg) and what asks for it: a plain install leaves these
# out (docs/install.md says why), and a job that needs one is refused in one line before any folder is made.
EXTRAS = {
    "wandb": ("wandb", "logger=wandb"),
    "deepspeed": ("deepspeed", "strategy=deepspeed_*"),
    "rapidocr_onnxruntime": ("ocr", "ocr=rapidocr"),
    "pytesseract": ("tesseract", "ocr=tesseract"),
    "hydra_plugins.hydra_optuna_sweeper": ("sweeps", "hparams_search=…"),
    "hydra_plugins.hydra_submitit_launcher": ("slurm", "hydra/launcher=slurm"),
    "litserve": ("serve", "crossmod serve"),
}
OCR_PACKAGES = {"rapidocr": "rapidocr_onnxruntime", "tesseract": "pytesseract"}


def installed(module: str) -> bool:
    """Whether `module` can be imported, found without importing it (its parent package is imported, if any)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def needs_package(module: str, key: str) -> None:
    """Refuse, naming the extra, when the optional part `module` is not installed."""
    if installed(module):
        return
    extra, asked = EXTRAS[module]
    raise UserError(
        f"{asked} needs {module.split('.')[-1]}, an optional part a plain install leaves out",
        f'pip install "crossmod[{extra}]"',
        key,
    )


def optional_packages(cfg: DictConfig) -> None:
    """The optional parts the composed job uses are installed: W&B, DeepSpeed, an OCR engine."""
    if "wandb" in (cfg.get("logger") or {}):
        needs_package("wandb", "logger")
    strategy = OmegaConf.select(cfg, "trainer.strategy._target_", default=None) or OmegaConf.select(cfg, "strategy._target_", default="")
    if "deepspeed" in str(strategy or "").lower():  # the strategy group's configs sit under trainer.strategy
        needs_package("deepspeed", "strategy")
    for node in ("", "data.", "eval_data."):
        ocr = OmegaConf.select(cfg, f"{node}ocr", default=None)
        engine = ocr if isinstance(ocr, str) else (ocr or {}).get("engine") if isinstance(ocr, DictConfig) else None
        if engine in OCR_PACKAGES:
            needs_package(OCR_PACKAGES[engine], f"{node}ocr")


def recipe(cfg: DictConfig, program: str, settings: str | None = None, example: str | None = None) -> None:
    """The experiment is one `program` runs: a prompting protocol names its program in `runs_with`, and a
    program reading a settings block (`fewshot`, `zeroshot` …) needs a recipe that has one."""
    chosen = _experiment(cfg)
    runs_with = cfg.get("runs_with")
    short = program.removeprefix("python ").removeprefix("-m ")
    if runs_with and runs_with != program:
        raise UserError(
            f"experiment={chosen} is not run by {short}: it is a recipe for `{runs_with}` (runs_with)",
            f"run it with `{runs_with} experiment={chosen} …`",
            "experiment",
        )
    if settings and settings not in cfg:
        what = f"experiment={chosen}" if chosen else "the config without an experiment="
        raise UserError(
            f"{what} has no `{settings}` settings, which {short} reads",
            f"pick one of its recipes, e.g. `{program} experiment={example} …`",
            "experiment",
        )


def _experiment(cfg: DictConfig) -> str | None:
    """The `experiment=` chosen (Hydra's record of the group choices), else the run's name when it is set."""
    from hydra.core.hydra_config import HydraConfig

    hydra = cfg.get("hydra") if "hydra" in cfg else (HydraConfig.get() if HydraConfig.initialized() else None)
    choices = OmegaConf.select(hydra, "runtime.choices", default=None) if hydra is not None else None
    if choices is not None:
        return choices.get("experiment")
    return None if OmegaConf.is_missing(cfg, "name") else cfg.get("name")


def data_folders(cfg: DictConfig, node: str) -> None:
    """`<node>.raw_dir` is a folder with its source's layout; a local `<node>.shard_dir` holds prepared shards."""
    data = cfg.get(node)
    if not isinstance(data, DictConfig):
        return
    raw_dir = data.get("raw_dir")
    if isinstance(raw_dir, str):
        if not Path(raw_dir).expanduser().is_dir():
            raise UserError(
                f"{node}.raw_dir={raw_dir} is not a folder",
                f"pass {node}.raw_dir=<the dataset's folder in its published layout> (docs/datasets.md)",
                f"{node}.raw_dir",
            )
        _source_layout(data, node)
    shard_dir = data.get("shard_dir")
    if isinstance(shard_dir, str):
        from crossmod.data.remote import is_remote
        from crossmod.data.shards import MANIFEST

        if not is_remote(shard_dir) and not (Path(shard_dir).expanduser() / MANIFEST).is_file():
            what = "is not a folder" if not Path(shard_dir).expanduser().is_dir() else f"has no {MANIFEST}"
            raise UserError(
                f"{node}.shard_dir={shard_dir} {what}: it is not a folder of prepared shards",
                f"pass {node}.shard_dir=<the folder `crossmod prepare data=<dataset> data.raw_dir=…` printed as `Shards:`>, "
                "or train on the raw data with data=<dataset> data.raw_dir=…",
                f"{node}.shard_dir",
            )


def _source_layout(data: DictConfig, node: str) -> None:
    """A raw source checks its folder's layout when built (the files it reads are there, its options known):
    built here, so a wrong folder is named before the run exists."""
    source = data.get("source")
    if not isinstance(source, DictConfig) or "_target_" not in source:
        return
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        instantiate(source)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, FileNotFoundError):  # the sources' own: a file of the published layout missing
            raise UserError(
                str(cause), f"pass {node}.raw_dir=<the dataset's folder in its published layout> (docs/datasets.md)", f"{node}.raw_dir"
            ) from cause
        if isinstance(cause, ValueError):  # the sources' option checks (languages, cultures, split scheme …)
            raise UserError(str(cause), f"correct {node}.source (configs/data/)", f"{node}.source") from cause
        raise


def fold_for_training(cfg: DictConfig) -> None:
    """A fold run's fold is one of num_folds; without a fold, the dataset's own splits must validate (as
    MemeDataModule requires after conversion: the same rule, checked here from the config or the manifest)."""
    data = cfg.data
    fold, num_folds = data.get("fold"), data.get("num_folds")
    if fold is not None:
        if not (isinstance(fold, int) and isinstance(num_folds, int) and 0 <= fold < num_folds):
            raise UserError(
                f"fold={fold} is outside 0..{num_folds - 1} (num_folds={num_folds})" if isinstance(num_folds, int) else f"fold={fold}",
                "pass fold=k with 0 ≤ k < num_folds",
                "fold",
            )
        return
    splits = _own_splits(data)
    if splits is None:
        return
    from crossmod.data.memes import cannot_train_on_own_splits

    train, val, present = splits
    if cannot_train_on_own_splits(train, val, present):
        has = f"has splits {sorted(present)}" if present is not None else "has no validation split"
        raise UserError(
            f"fold=null trains on the dataset's own splits, but this dataset {has} (data.train_splits={train}, data.val_splits={val})",
            "cross-validate: pass fold=k num_folds=n, e.g. fold=0 num_folds=3 (crossmod cv runs every fold), "
            "or set data.train_splits / data.val_splits",
            "fold",
        )


def _own_splits(data: DictConfig) -> tuple[list[str], list[str], set[str] | None] | None:
    """(train splits, validation splits, splits present or None) as far as known before conversion."""
    if "val_splits" not in data or "train_splits" not in data:
        return None  # the datamodule's defaults: train / val
    if not OmegaConf.is_interpolation(data, "val_splits"):
        if OmegaConf.is_interpolation(data, "train_splits"):
            return None
        return list(data.train_splits), list(data.val_splits), None
    shard_dir = data.get("shard_dir")  # data=shards: the manifest records the splits (checked above to exist)
    if not isinstance(shard_dir, str):
        return None
    from crossmod.data.manifest_checks import ManifestError
    from crossmod.data.remote import is_remote
    from crossmod.data.shards import read_manifest, split_roles

    if is_remote(shard_dir):
        return None
    try:
        manifest = read_manifest(Path(shard_dir).expanduser())
    except ManifestError as error:
        raise UserError(
            str(error), "point data.shard_dir at a folder crossmod prepare wrote, or convert again", "data.shard_dir"
        ) from error
    roles = split_roles(manifest)
    train = list(data.train_splits) if not OmegaConf.is_interpolation(data, "train_splits") else list(roles["train"])
    return train, list(roles["val"]), set(manifest["counts"]["split"])


def existing(cfg: DictConfig, key: str, what: str, marker: str | None = None) -> Path:
    """The local path `cfg[key]` names exists (and holds `marker`, when given)."""
    path = Path(str(cfg[key])).expanduser()
    if not path.exists():
        raise UserError(f"{key}={cfg[key]} does not exist", f"pass {key}=<{what}>", key)
    if marker and not (path / marker).is_file():
        raise UserError(f"{key}={cfg[key]} is not {what.split(':')[0]} (no {marker} in it)", f"pass {key}=<{what}>", key)
    return path


def retrieval_settings(cfg: DictConfig) -> None:
    """model.objective, model.scoring and model.retrieval (RGCL and retrieval classification) hold values that can work:
    each component is built here, before any data or model is (the components are small: settings and a call)."""
    from hydra.utils import instantiate

    from crossmod.models.retrieval.settings import RetrievalSettings

    model = cfg.get("model") or {}
    for old, key, group in (("rgcl", "objective", "rgcl"), ("classify", "scoring", "<head | retrieval>")):
        if old in model:  # the flags the components replaced (issue 60); a run's config.yaml from then still loads
            raise UserError(
                f"model.{old} is no longer a setting: what it chose is the component model.{key}",
                f"choose model/{key}={group} (configs/model/{key}/) and set its keys as model.{key}.<key>=…",
                f"model.{old}",
            )
    retrieval = model.get("retrieval")
    try:
        RetrievalSettings.of(OmegaConf.to_container(retrieval) if retrieval is not None else None)
    except (TypeError, ValueError) as error:
        raise UserError(str(error), "see configs/experiment/hm_rgcl.yaml for model.retrieval's keys", "model.retrieval") from None
    for key, group in (("objective", "cross_entropy | rgcl"), ("scoring", "head | retrieval")):
        node = model.get(key)
        if node is None:
            continue
        try:
            instantiate(node)
        except Exception as error:  # noqa: BLE001 - Hydra wraps the component's own ValueError/TypeError
            cause = next((e for e in error_chain(error) if isinstance(e, (TypeError, ValueError))), error)
            raise UserError(
                f"model.{key} ({node.get('_target_')}): {str(cause).splitlines()[0]}",
                f"choose model/{key}=<{group}> (configs/model/{key}/) and set its keys as model.{key}.<key>=…",
                f"model.{key}",
            ) from None


MODEL_FOLDER_KEYS = ("name_or_path", "tokenizer", "processor", "image_processor")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def model_folders(cfg: DictConfig, node: str = "model") -> None:
    """Every model folder the config names (`*.name_or_path`, tokenizers, processors) that is a path, not a hub id
    (`org/name`), exists: Transformers would otherwise take it for a hub id and fail with `Repo id must be in the form`.
    Values still to be resolved (`${…}`, e.g. the tiny models built on first use) are left to their resolvers."""

    def walk(config: DictConfig, prefix: str) -> None:
        for key in list(config.keys()):
            full = f"{prefix}.{key}"
            if OmegaConf.is_missing(config, key) or OmegaConf.is_interpolation(config, key):
                continue
            value = config[key]
            if isinstance(value, DictConfig):
                walk(value, full)
            elif key in MODEL_FOLDER_KEYS and isinstance(value, str) and value and not HUB_ID.fullmatch(value):
                if not Path(value).expanduser().is_dir():
                    raise UserError(
                        f"{full}={value} is not a folder (and not a hub id such as org/name)",
                        f"pass {full}=<a local model folder (config.json in it)> or a hub id",
                        full,
                    )

    model = cfg.get(node)
    if isinstance(model, DictConfig):
        walk(model, node)


def accelerator(cfg: DictConfig) -> None:
    """trainer=gpu (accelerator gpu/cuda) needs a GPU torch can see."""
    trainer = cfg.get("trainer") or {}
    if str(trainer.get("accelerator", "")) not in ("gpu", "cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError(
            f"trainer.accelerator={trainer.accelerator} asks for a GPU, but torch sees none (torch.cuda.is_available() is False)",
            "run on a GPU node (README: On a GPU cluster), or train on the CPU with trainer=cpu",
            "trainer",
        )


def resume_checkpoint(cfg: DictConfig) -> None:
    """ckpt_path names a checkpoint that is there."""
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path in (None, "") or OmegaConf.is_interpolation(cfg, "ckpt_path"):
        return
    path = Path(str(ckpt_path)).expanduser()
    if not path.exists():
        raise UserError(
            f"ckpt_path={ckpt_path} does not exist",
            "pass ckpt_path=<run>/checkpoints/last.ckpt (a run stopped by a signal saved it there; its status.json names it)",
            "ckpt_path",
        )
    # a checkpoint may come from someone else: it is read as data before Lightning or DeepSpeed unpickle it
    from crossmod.artifacts.consolidate import check_resumable, is_deepspeed_checkpoint
    from crossmod.models.trusted_targets import UntrustedConfigError, check_checkpoint

    if is_deepspeed_checkpoint(path):
        check_resumable(path)  # UnreadableCheckpoint is a UserError naming the shard
    elif path.is_file():
        try:
            check_checkpoint(path)
        except UntrustedConfigError as error:
            raise UserError(str(error), "resume only from checkpoints your own runs wrote", "ckpt_path") from None


def decision_settings(cfg: DictConfig) -> None:
    """calibration=… names a map crossmod fits (evaluation/calibration.py METHODS), abstention=… a disagreement score
    it computes (evaluation/abstention.py SCORES)."""
    from crossmod.evaluation.calibration import METHODS

    method = cfg.get("calibration", "temperature")
    if method not in METHODS:
        raise UserError(f"calibration={method} is not a calibration map crossmod fits", f"use calibration={' | '.join(METHODS)}", "calibration")
    from crossmod.evaluation.abstention import SCORES

    score = cfg.get("abstention", "spread")
    if score not in SCORES:
        raise UserError(f"abstention={score} is not a disagreement score crossmod computes", f"use abstention={' | '.join(SCORES)}", "abstention")


def moderation_policy(cfg: DictConfig) -> None:
    """policy=… names actions (act, review) with one target each (precision or recall) in (0, 1]."""
    policy = cfg.get("policy")
    if not policy:
        return
    from crossmod.evaluation.policies import check_policy

    try:
        check_policy({action: dict(target) if OmegaConf.is_config(target) else target for action, target in policy.items() if action != "name"})
    except ValueError as error:
        raise UserError(str(error), "e.g. policy=cautious (configs/policy/cautious.yaml), or policy.act.precision=0.8", "policy") from None


# ------------------------------------------------------------------------------------------ per entry point
def training_settings(cfg: DictConfig) -> None:
    """What train.py and cross_validate.py both check first: a training recipe, every value set and in range, the
    calibration map, disagreement score and policy named, the datasets' folders there."""
    recipe(cfg, TRAIN)
    require(cfg)
    check_ranges(cfg)
    decision_settings(cfg)
    moderation_policy(cfg)
    data_folders(cfg, "data")
    data_folders(cfg, "eval_data")


def train(cfg: DictConfig) -> None:
    """train.py: a training recipe, every value set, its data there, a fold where the dataset needs one, model
    folders and the checkpoint to resume from there, a GPU where the trainer asks for one."""
    training_settings(cfg)
    fold_for_training(cfg)
    retrieval_settings(cfg)
    model_folders(cfg)
    resume_checkpoint(cfg)
    accelerator(cfg)
    optional_packages(cfg)


def cross_validate(cfg: DictConfig) -> None:
    """cross_validate.py: a training recipe (each fold is train.py), every value set, its data there."""
    training_settings(cfg)
    retrieval_settings(cfg)
    model_folders(cfg)
    accelerator(cfg)
    optional_packages(cfg)
    if not (isinstance(cfg.num_folds, int) and cfg.num_folds >= 2):
        raise UserError(f"num_folds={cfg.num_folds} leaves nothing to cross-validate", "pass num_folds=k with k ≥ 2", "num_folds")
    if (cfg.get("trainer") or {}).get("fast_dev_run"):  # checked before fold 0 trains: the report needs every fold's files
        raise UserError(
            "trainer.fast_dev_run (debug=fdr) writes no checkpoint and no validation history: the cross-validation report "
            "would have nothing to read after every fold has trained",
            "use debug=limit for a quick cross-validation (a few batches, real files), or crossmod train debug=fdr for one fold",
            "debug",
        )


def prompting(program: str, settings: str, example: str) -> Check:
    """zeroshot.py, crossmod fewshot / crossmod memebridge: their recipe, every value set, the data there."""

    def check(cfg: DictConfig) -> None:
        recipe(cfg, program, settings, example)
        require(cfg)
        data_folders(cfg, "data")

    return check


def evaluate(cfg: DictConfig) -> None:
    """evaluate.py: ckpt and data set; ckpt names something there; the dataset's folders there."""
    require(cfg, ["ckpt", "data"])
    check_ranges(cfg)
    what = "run dir | .ckpt file | exported culture folder | folder of runs"
    ckpt = existing(cfg, "ckpt", what)
    if ckpt.is_dir() and not (ckpt / "culture_card.json").is_file() and not any(ckpt.rglob("metrics.json")):
        raise UserError(
            f"ckpt={cfg.ckpt} holds no run (metrics.json), checkpoint or exported culture folder", f"pass ckpt=<{what}>", "ckpt"
        )
    data_folders(cfg, "data")
    optional_packages(cfg)


def predict(cfg: DictConfig) -> None:
    """predict.py: adapters and inputs set; adapters an exported culture folder; local inputs there."""
    from crossmod.data.remote import is_remote

    require(cfg, ["adapters", "inputs"])
    check_ranges(cfg)
    folders = culture_adapters(cfg)
    if len(folders) > 1 and cfg.get("culture"):
        raise UserError(f"culture={cfg.culture} checks one folder's culture; {len(folders)} adapters are given", "drop culture=, or give one adapter", "culture")
    from crossmod.evaluation.abstention import SCORES

    if cfg.get("disagreement", "spread") not in SCORES:
        raise UserError(f"disagreement={cfg.disagreement} is not a disagreement score crossmod computes", f"use disagreement={' | '.join(SCORES)}", "disagreement")
    if not is_remote(str(cfg.inputs)):
        existing(cfg, "inputs", "a folder of images | a memes .jsonl file | a shard folder")
    optional_packages(cfg)


def culture_adapters(cfg: DictConfig) -> list[str]:
    """`adapters`: exported culture folders, each there, each culture once."""
    folders = adapter_folders(cfg)
    what = "an exported culture folder: crossmod export run=<run dir> writes <run dir>/export/<culture>"
    for index, folder in enumerate(folders):
        key = "adapters" if len(folders) == 1 else f"adapters[{index}]"
        existing({key: folder}, key, what, "culture_card.json")  # type: ignore[arg-type]
    cultures = [_card_culture(Path(folder)) for folder in folders]
    twice = sorted({c for c in cultures if c is not None and cultures.count(c) > 1})
    if twice:
        raise UserError(f"adapters holds two exports of culture {twice[0]}: their columns would overwrite each other", "give each culture once", "adapters")
    return folders


def adapter_folders(cfg: DictConfig) -> list[str]:
    """predict's `adapters`: one exported culture folder, or a list of them."""
    adapters = cfg.adapters
    return [str(a) for a in adapters] if isinstance(adapters, (list, ListConfig)) else [str(adapters)]


def _card_culture(folder: Path) -> str | None:
    """The culture an exported folder's card names (None when the card cannot say: loading names what is wrong)."""
    try:
        card = json.loads((folder / "culture_card.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return card.get("culture") if isinstance(card, dict) and isinstance(card.get("culture"), str) else None


def export(cfg: DictConfig) -> None:
    """export.py: run set, and a run directory (train.py writes metrics.json at its end)."""
    require(cfg, ["run"])
    existing(cfg, "run", "a run directory: <paths.log_dir>/<name>/runs/<id>", "metrics.json")
    if cfg.get("kind", "head") not in ("head", "retrieval"):
        raise UserError(f"kind={cfg.kind} is not one of [head, retrieval]", "pass kind=head (the culture's head) or kind=retrieval", "kind")
    if cfg.get("format", "cultures") not in ("cultures", "hf_seq_cls"):
        raise UserError(f"format={cfg.format} is not an export format", "pass format=cultures (a folder per culture) or format=hf_seq_cls", "format")
    if cfg.get("format") == "hf_seq_cls" and (cfg.get("culture") or cfg.get("kind", "head") != "head" or cfg.get("merge")):
        raise UserError("format=hf_seq_cls writes every culture's head into one classifier, its LoRA merged", "drop culture=, kind= and merge=", "format")
    if cfg.get("culture"):  # against the run's own heads, before its model is loaded (minutes for a VLM)
        heads = _run_heads(Path(str(cfg.run)))
        if heads is not None and str(cfg.culture) not in heads:
            raise UserError(
                f"culture {cfg.culture!r} is not a head of this run (heads: {heads})",
                f"pass culture=<one of {heads}>, or leave it out to export every head",
                "culture",
            )


def _run_heads(run_dir: Path) -> list[str] | None:
    """The heads a run trained, from its config.yaml (None when it does not say: the loaded model decides)."""
    from crossmod.artifacts.runs import RunConfigError, read_config

    try:
        heads = OmegaConf.select(read_config(run_dir / "config.yaml"), "data.heads")
    except RunConfigError:
        raise
    except Exception:  # an unreadable config is the loader's to refuse, by name
        return None
    return [str(name) for name in heads] if isinstance(heads, DictConfig) else None


def reads(**whats: str) -> Check:
    """A job that reads what its keys name (a path, or a list of paths): each key set, each path there."""

    def check(cfg: DictConfig) -> None:
        require(cfg, list(whats))
        for key, what in whats.items():
            values = cfg[key] if OmegaConf.is_list(cfg[key]) else [cfg[key]]
            for value in values:
                if not Path(str(value)).expanduser().exists():
                    raise UserError(f"{key}: {value} does not exist", f"pass {key}=<{what}>", key)

    return check


def prepare(cfg: DictConfig) -> None:
    """prepare: the dataset's raw folder is set and has its source's layout (a generated dataset needs none)."""
    require(cfg, ["data"])
    data_folders(cfg, "data")

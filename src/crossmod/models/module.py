"""MemeClassifier: backbone → features → one output per head, with masked losses and per-head metrics.

The backbone is built in `configure_model` from its config, so large models can be created
sharded (DeepSpeed ZeRO-3) or on the right device; the preprocessor is built eagerly because the
datamodule needs it before any weights exist.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import get_method, instantiate
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchmetrics import MeanMetric

from crossmod.data.even_batches import FILLER
from crossmod.data.heads import Head, parse_heads
from crossmod.evaluation.metrics import HeadMetrics
from crossmod.models.backbone import Backbone, checked_backbone
from crossmod.models.heads import GroupHeadLayers, HeadLayers, masked_loss
from crossmod.models.objectives import AnnotatorGroups, Objective
from crossmod.models.retrieval.bank import Bank
from crossmod.models.retrieval.settings import RetrievalSettings
from crossmod.models.scoring_rules import RetrievalVote, ScoringRule
from crossmod.models.sharding import partition_summary, tell_transformers, zero3_config
from crossmod.models.trusted_targets import check_checkpoint

EVAL_STAGES = ("val", "test")
# State-dict prefixes of the head layers before they were named for what they are (checkpoints then said `heads.`)
RENAMED_PREFIXES = {
    "heads.": "head_layers.",
    "backbone.text_heads.": "backbone.text_head_layers.",
    "backbone.image_heads.": "backbone.image_head_layers.",
}
log = logging.getLogger(__name__)


def _plain(config: Any) -> Any:
    return OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else config


def rename_head_keys(module: nn.Module, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """Load-state-dict pre-hook: a checkpoint written before the head layers' rename loads as it is
    (its `heads.*` weights are renamed in place; a module-level function, so the model still pickles)."""
    for key in [k for k in state if k.startswith(prefix)]:
        local = key[len(prefix) :]
        old = next((o for o in RENAMED_PREFIXES if local.startswith(o)), None)
        if old is not None and prefix + RENAMED_PREFIXES[old] + local[len(old) :] not in state:
            state[prefix + RENAMED_PREFIXES[old] + local[len(old) :]] = state.pop(key)


TEXT_ENCODER = "backbone.text."
LAYER_INDEX = re.compile(r"\.layers?\.(\d+)\.")


def layer_scales(names: list[str], decay: float | None) -> dict[str, float]:
    """Layer-wise learning-rate decay of the text encoder (ELECTRA's, BEiT's): the head and everything outside the
    encoder at the base rate, its layer i of L at decay^(L - i), its embeddings at decay^(L + 1). Empty without decay."""
    if decay is None:
        return {}
    if not 0.0 < float(decay) <= 1.0:
        raise ValueError(f"model.layer_decay must be in (0, 1], got {decay}")
    encoder = [n for n in names if n.startswith(TEXT_ENCODER)]
    layers = {n: int(m.group(1)) for n in encoder if (m := LAYER_INDEX.search(n))}
    depth = max(layers.values(), default=-1) + 1
    return {n: float(decay) ** (depth - layers[n] if n in layers else depth + 1) for n in encoder}


OBJECTIVES = "crossmod.models.objectives"
SCORING_RULES = "crossmod.models.scoring_rules"


def with_components(hparams: Any) -> dict[str, Any]:
    """Model settings written before the objective and the scoring rule were components (a run's config, a checkpoint's
    hyperparameters, an export's model_config.json with `rgcl: {…}` and `classify: retrieval`), as the components they
    chose: an older run loads as it trained and scored, never as the defaults."""
    hparams = dict(hparams)
    rgcl, classify = hparams.pop("rgcl", None), hparams.pop("classify", None)
    if hparams.get("objective") is None:
        hparams["objective"] = {"_target_": f"{OBJECTIVES}.RGCL", **rgcl} if rgcl else {"_target_": f"{OBJECTIVES}.CrossEntropy"}
    if hparams.get("scoring") is None:
        vote = {"_target_": f"{SCORING_RULES}.RetrievalVote", "settings": hparams.get("retrieval")}
        hparams["scoring"] = vote if classify == "retrieval" else {"_target_": f"{SCORING_RULES}.HeadScores"}
    return hparams


class MemeClassifier(L.LightningModule):
    """Multi-head classifier over any feature backbone (text, image, fusion …).

    Two behaviours are components given as `_target_` configs and held, never switched on: the training `objective`
    (`model.objective`: cross-entropy or RGCL, src/crossmod/models/objectives.py) and the `scoring` rule
    (`model.scoring`: the head layers or a retrieval vote, src/crossmod/models/scoring_rules.py). The backbone declares
    `crossmod.models.backbone.Backbone`.
    """

    head_rule: str | None = None  # its own heads answer; a head mapping (src/crossmod/results/eval_data.py ScoredAs) names its rule

    def __init__(
        self,
        fusion: dict[str, Any],
        preprocessor: dict[str, Any],
        heads: dict[str, dict[str, Any]],
        optimizer: dict[str, Any],
        text: dict[str, Any] | None = None,
        image: dict[str, Any] | None = None,
        scheduler: dict[str, Any] | None = None,
        head_dropout: float = 0.0,
        param_groups: dict[str, dict[str, Any]] | None = None,
        name_or_path: str | None = None,
        prompt: dict[str, Any] | None = None,
        family: str | dict[str, Any] | None = None,
        objective: dict[str, Any] | None = None,
        scoring: dict[str, Any] | None = None,
        retrieval: dict[str, Any] | None = None,
        head_init: str = "random",
        layer_decay: float | None = None,
    ) -> None:
        """`name_or_path`, `prompt` and `family` are family-level settings (the VLM's checkpoint, prompt, family row) that the
        fusion and the preprocessor share through interpolation; the class does not read them itself, it keeps them with
        the hyperparameters, where the checkpoint and an export's model_config.json record them and they are read back
        (the card's base and prompt, the `model.name_or_path=<local copy>` override of a moved base). `objective` and
        `scoring` are `_target_` configs (configs/model/objective, configs/model/scoring), built here. `head_init`
        (random | probe: LP-FT, applied before fit by src/crossmod/results/baselines.py) and `layer_decay` (layer-wise
        learning-rate decay of the text encoder, `parameter_groups`) are the fine-tuning recipe's."""
        super().__init__()
        # logger=False: loggers get the whole run config, secrets redacted (src/crossmod/training/pipeline.py), not these
        self.save_hyperparameters({k: _plain(v) for k, v in locals().items() if k not in ("self", "__class__")}, logger=False)
        self.heads: dict[str, Head] = parse_heads(self.hparams.heads)  # order: the order of the logits
        self.preprocessor = instantiate(self.hparams.preprocessor, heads=self.hparams.heads)
        self.backbone: Backbone | None = None
        self.head_layers: HeadLayers | None = None
        self.metrics = nn.ModuleDict({stage: HeadMetrics(self.heads) for stage in EVAL_STAGES})
        self.losses = nn.ModuleDict({stage: MeanMetric(nan_strategy="disable") for stage in EVAL_STAGES})
        self.register_load_state_dict_pre_hook(rename_head_keys)
        self._after_build: Callable[[MemeClassifier], None] | None = None  # `when_built`
        components = with_components({key: self.hparams[key] for key in ("objective", "scoring", "retrieval")})
        self.hparams.update(objective=components["objective"], scoring=components["scoring"])  # a checkpoint names both
        self.objective: Objective = instantiate(components["objective"])
        self.scoring: ScoringRule = instantiate(components["scoring"])
        # what a retrieval export votes with (checked under the head rule too: a head-scored run exports as one)
        self.retrieval_settings = RetrievalSettings.of(self.hparams.retrieval)
        if self.objective.needs_votes and any(not head.is_binary for head in self.heads.values()):
            raise ValueError(
                f"{type(self.objective).__name__} trains binary heads on the annotators' votes; "
                f"{[n for n, h in self.heads.items() if not h.is_binary]} are not"
            )
        if isinstance(self.objective, AnnotatorGroups):  # batches carry the votes of the objective's grouping
            if not hasattr(self.preprocessor, "groups"):
                raise ValueError(f"model/objective=annotator_groups: {type(self.preprocessor).__name__} carries no annotator groups")
            self.preprocessor.groups = None if self.objective.groups is None else list(self.objective.groups)
        if self.uses_embedding and any(not head.is_binary for head in self.heads.values()):
            raise ValueError(
                f"RGCL and retrieval classification need binary heads; {[n for n, h in self.heads.items() if not h.is_binary]} are not"
            )
        self.retrieval_bank: Bank | None = None  # the training memes' embeddings (src/crossmod/inference/retrieval_bank.py)

    @property
    def uses_embedding(self) -> bool:
        """The objective or the scoring rule works in the meme embedding (RGCL, a retrieval vote)."""
        return self.objective.needs_embedding or self.scoring.needs_bank

    def needs_bank(self, stage: str) -> bool:
        """Whether `stage` (`fit`: each training epoch; `val`, `test`, `predict`) reads the training memes' bank, for the
        callback that builds it (src/crossmod/inference/retrieval_bank.py)."""
        return self.objective.needs_bank if stage == "fit" else self.scoring.needs_bank

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: str | Path, map_location: Any = None, strict: bool | None = None, **kwargs: Any
    ) -> MemeClassifier:
        """Lightning's loader, once the checkpoint's hyperparameters are checked: a checkpoint is data and
        may only name crossmod's own parts (src/crossmod/models/trusted_targets.py). Plain data only (weights_only)."""
        if kwargs.get("hparams_file") is not None:
            raise ValueError("hparams_file is not supported: a crossmod checkpoint carries its own (checked) hyperparameters")
        hparams = with_components(check_checkpoint(checkpoint_path))
        kwargs = {"objective": hparams["objective"], "scoring": hparams["scoring"], **kwargs, "weights_only": True}
        return super().load_from_checkpoint(checkpoint_path, map_location=map_location, strict=strict, **kwargs)

    @classmethod
    def unbuilt_from_checkpoint(cls, checkpoint_path: str | Path) -> tuple[MemeClassifier, dict[str, torch.Tensor]]:
        """The checkpoint's classifier, not yet built, and its weights: for Lightning to build in partitions (ZeRO-3)
        before the weights go in. The checkpoint is checked and read as plain data, as `load_from_checkpoint` does."""
        check_checkpoint(checkpoint_path)
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        return cls(**with_components(checkpoint["hyper_parameters"])), checkpoint["state_dict"]

    def configure_model(self) -> None:
        """Build encoders, fusion and heads once (Lightning calls this inside the strategy's init context)."""
        if self.backbone is not None:
            return
        config = zero3_config(self._trainer.strategy if self._trainer is not None else None)
        if config is not None:  # kept alive with the model: Transformers holds it by weak reference
            self._transformers_zero3 = tell_transformers(config)
        encoders = {name: instantiate(self.hparams[name]) for name in ("text", "image") if self.hparams.get(name)}
        self.backbone = checked_backbone(instantiate(self.hparams.fusion, **encoders))
        if self.backbone.output_dim and isinstance(self.objective, AnnotatorGroups):  # a head per annotator group
            if not self.objective.groups:
                raise ValueError("model/objective=annotator_groups: no groups yet (the run finds them in its training memes' votes)")
            self.head_layers = GroupHeadLayers(self.backbone.output_dim, self.heads, list(self.objective.groups), self.hparams.head_dropout)
        elif isinstance(self.objective, AnnotatorGroups):
            raise ValueError(f"{type(self.backbone).__name__} returns logits per modality, no shared features for annotator group heads")
        elif self.backbone.output_dim:  # None: late fusion and a verbalizer return logits per head themselves
            self.head_layers = HeadLayers(self.backbone.output_dim, self.heads, self.hparams.head_dropout)
        elif self.uses_embedding:
            raise ValueError(f"{type(self.backbone).__name__} returns logits per modality, no shared meme embedding for RGCL or retrieval")
        caveat = self.backbone.embedding_caveat()
        if self.objective.needs_embedding and caveat:
            rank_zero_warn(caveat)
        if config is not None:
            rank_zero_info(partition_summary(self.parameters(), self._trainer.global_rank, self._trainer.world_size))
        after_build, self._after_build = self._after_build, None
        if after_build is not None:
            after_build(self)

    def when_built(self, step: Callable[[MemeClassifier], None]) -> None:
        """Run `step` on this classifier once Lightning has built it (`configure_model`): e.g. a run's weights, which
        under ZeRO-3 can only go into the partitions once they exist (src/crossmod/artifacts/loading.py)."""
        if self.backbone is not None:
            raise RuntimeError("the classifier is already built: apply the step now instead")
        self._after_build = step

    def teardown(self, stage: str) -> None:
        """Say what the vision cache did in this stage (read, encoded, written) and what its folder holds."""
        if self.backbone is not None and self.backbone.vision_cache is not None:
            self.backbone.vision_cache.end_stage(stage)

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Logits per head, by the scoring rule: the head layers, or the nearest training memes' vote (RGCL's kNN)."""
        return self.scoring.logits(self, batch)

    def head_logits(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The head layers' logits (what trains, whatever scores): a fusion returns features for the shared head layers,
        or (late fusion) logits itself."""
        output = self.backbone(batch)
        return output if isinstance(output, dict) else self.logits_from(output)

    def logits_from(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """The head layers' logits from the backbone's features (a backbone whose embedding stops before its last
        activation, e.g. CLIP fusion under RGCL, applies the rest in `head_input`)."""
        return self.head_layers(self.backbone.head_input(features))

    def group_logits(self, batch: dict[str, Any]) -> torch.Tensor:
        """Each annotator group's logit, [memes, groups] (annotator_groups' heads)."""
        return self.head_layers.group_logits(self.backbone.head_input(self.embed(batch)))

    def with_groups(self, groups: list[str]) -> None:
        """The annotator groups the heads are built for (found in the training memes before the model is built), kept
        in the hyperparameters so a checkpoint or an export rebuilds the same rows."""
        if self.backbone is not None:
            raise RuntimeError("the classifier is already built: its group heads are fixed")
        self.objective = dataclasses.replace(self.objective, groups=tuple(groups))
        self.hparams.objective = {**self.hparams.objective, "groups": list(groups)}
        self.preprocessor.groups = list(groups)

    def embed(self, batch: dict[str, Any]) -> torch.Tensor:
        """The meme embedding RGCL and retrieval work in: the features the head layers read."""
        output = self.backbone(batch)
        if isinstance(output, dict):
            raise ValueError(f"{type(self.backbone).__name__} returns logits per modality, no shared meme embedding for RGCL or retrieval")
        return output

    def use_bank(self, bank: Bank) -> None:
        """The memes retrieval votes among and RGCL mines: the training memes under the current weights (built by
        src/crossmod/inference/retrieval_bank.py in a run, by the loader for a finished one)."""
        self.retrieval_bank = bank

    def score_by_retrieval(self, bank: Bank, settings: RetrievalSettings) -> None:
        """Score by the nearest labelled memes of `bank` (an exported retrieval adapter's database), with the vote's
        `settings` (k, weighting), instead of the head layers."""
        self.scoring, self.retrieval_settings = RetrievalVote(settings), settings
        self.use_bank(bank)

    def bank(self) -> Bank:
        """The bank, on this model's device."""
        if self.retrieval_bank is not None and self.retrieval_bank.embeddings.device != self.device:
            self.retrieval_bank = self.retrieval_bank.to(self.device)  # once, on the first batch on another device
        if self.retrieval_bank is None:
            raise RuntimeError(
                "no retrieval bank: training builds it from the training memes (callbacks.retrieval_bank); to score a "
                "retrieval run later give crossmod evaluate its run dir (not a .ckpt), or export it with crossmod export kind=retrieval"
            )
        return self.retrieval_bank

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        """Each head's probabilities for the batch, with the memes' positions in the scored list (`index`), so
        predictions made on several processes can be put back in order (src/crossmod/inference/scoring.py)."""
        return self.scoring.predict(self, batch)

    def heads_loss(self, logits: dict[str, torch.Tensor], labels: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each head's masked loss on its annotated memes, averaged over the heads."""
        losses = [masked_loss(logits[name], labels[name], head)[0] for name, head in self.heads.items()]
        return torch.stack(losses).mean()

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """The objective's step; the head layers train whatever the scoring rule."""
        losses = self.objective(self, batch)
        self.log_dict(losses, on_step=True, on_epoch=False, batch_size=len(batch["ids"]))
        return losses["train/loss"]

    def _eval_step(self, stage: str, batch: dict[str, Any]) -> dict[str, Any] | None:
        """Updates the stage's metrics, and returns the batch's scores (ids, probabilities per head, labels, on the
        device) for callbacks to keep from `on_*_batch_end` (the prediction files, MHC's functional tests)."""
        logits = self(batch)
        if batch.get(FILLER):  # keeps ranks in lockstep (ZeRO-3); its samples are scored on their own rank
            return None
        self.metrics[stage].update(logits, batch["labels"])
        self.losses[stage].update(self.heads_loss(logits, batch["labels"]), len(batch["ids"]))
        probs = {name: head.probabilities(logits[name].detach().float()) for name, head in self.heads.items()}
        return {"ids": batch["ids"], "probs": probs, "labels": batch["labels"]}

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any] | None:
        return self._eval_step("val", batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any] | None:
        return self._eval_step("test", batch)

    def _log_epoch_metrics(self, stage: str) -> None:
        results = self.metrics[stage].compute()
        self._warn_undefined(stage, self.metrics[stage].undefined)
        results["loss"] = float(self.losses[stage].compute())
        self.metrics[stage].reset()
        self.losses[stage].reset()
        self.log_dict({f"{stage}/{key}": value for key, value in results.items()}, sync_dist=False, rank_zero_only=False)

    def _warn_undefined(self, stage: str, undefined: dict[str, str]) -> None:
        """One warning per head and evaluation (rank 0; not for the sanity check's few batches): a NaN
        score is left out of `{stage}/mean/*`, which is what checkpointing and sweeps compare."""
        trainer = self._trainer
        if trainer is not None and (trainer.sanity_checking or not trainer.is_global_zero):
            return
        for head, what in undefined.items():
            log.warning("%s: head %s: %s: NaN, left out of %s/mean", stage, head, what, stage)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch_metrics("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch_metrics("test")

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Optimizer groups: per-module learning rates (`param_groups` patterns, first match wins), and no
        weight decay for biases and norm weights."""
        rules = [(name, re.compile(rule["pattern"]), rule) for name, rule in (self.hparams.param_groups or {}).items()]
        weight_decay = float(self.hparams.optimizer.get("weight_decay", 0.0))
        trainable = [(name, param) for name, param in self.named_parameters() if param.requires_grad]
        scales = layer_scales([name for name, _ in trainable], self.hparams.get("layer_decay"))
        buckets: dict[tuple[str, bool, float], list[nn.Parameter]] = {}
        for name, param in trainable:
            rule = next((r for r in rules if r[1].search(name)), None)
            no_decay = param.ndim < 2 or "norm" in name.lower()
            buckets.setdefault((rule[0] if rule else "default", no_decay, scales.get(name, 1.0)), []).append(param)
        by_name = {name: rule for name, _, rule in rules}
        groups = []
        for (group, no_decay, scale), params in buckets.items():
            rule = by_name.get(group, {})
            decay = float(rule.get("weight_decay", weight_decay))
            label = f"{group}{'/no_decay' if no_decay else ''}{f'/lr x{scale:.4g}' if scale != 1.0 else ''}"
            entry = {"params": params, "weight_decay": 0.0 if no_decay else decay, "name": label}
            if "lr" in rule or scale != 1.0:
                entry["lr"] = float(rule.get("lr", self.hparams.optimizer["lr"])) * scale
            groups.append(entry)
        return groups

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer_cfg = dict(self.hparams.optimizer)
        optimizer_cfg.pop("weight_decay", None)
        optimizer = instantiate(optimizer_cfg, self.parameter_groups())
        if not self.hparams.scheduler:
            return {"optimizer": optimizer}
        scheduler_cfg = dict(self.hparams.scheduler)
        total = int(self.trainer.estimated_stepping_batches)
        ratio, steps = scheduler_cfg.pop("warmup_ratio", None), scheduler_cfg.pop("warmup_steps", None)
        if ratio is not None and steps is not None:
            raise ValueError("scheduler: give warmup_ratio or warmup_steps, not both")
        warmup = int(steps) if steps is not None else int((ratio or 0.0) * total)
        schedule_args = {"optimizer": optimizer, "num_warmup_steps": warmup, "num_training_steps": total}
        accepted = inspect.signature(get_method(scheduler_cfg["_target_"])).parameters  # constant schedules take no total
        scheduler = instantiate(scheduler_cfg, **{k: v for k, v in schedule_args.items() if k in accepted})
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

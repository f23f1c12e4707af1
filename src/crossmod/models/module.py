"""MemeClassifier: backbone → features → one output per head, with masked losses and per-head metrics.

The backbone is built in `configure_model` from its config, so large models can be created
sharded (DeepSpeed ZeRO-3) or on the right device; the preprocessor is built eagerly because the
datamodule needs it before any weights exist.
"""

from __future__ import annotations

import inspect
import json
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
from safetensors.torch import load_file
from torch import nn
from torchmetrics import MeanMetric

from crossmod.data.cache_files import save_weights
from crossmod.data.even_batches import FILLER
from crossmod.data.heads import Head, parse_heads
from crossmod.evaluation.metrics import HeadMetrics
from crossmod.models.heads import HeadLayers, masked_loss
from crossmod.models.retrieval.bank import Bank, explain, nearest, retrieval_logits, rgcl_objective, votes
from crossmod.models.retrieval.settings import CLASSIFY, RetrievalSettings, RGCLSettings
from crossmod.models.sharding import gathered, partition_summary, tell_transformers, zero3_config
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


class MemeClassifier(L.LightningModule):
    """Multi-head classifier over any feature backbone (text, image, fusion …)."""

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
        rgcl: dict[str, Any] | None = None,
        classify: str = "head",
        retrieval: dict[str, Any] | None = None,
    ) -> None:
        """`name_or_path`, `prompt` and `family` are family-level settings (the VLM's checkpoint, prompt, family row) that the
        fusion and the preprocessor share through interpolation; they are kept with the hyperparameters."""
        super().__init__()
        # logger=False: loggers get the whole run config, secrets redacted (src/crossmod/lib/pipeline.py), not these
        self.save_hyperparameters({k: _plain(v) for k, v in locals().items() if k not in ("self", "__class__")}, logger=False)
        self.heads: dict[str, Head] = parse_heads(self.hparams.heads)  # order: the order of the logits
        self.preprocessor = instantiate(self.hparams.preprocessor, heads=self.hparams.heads)
        self.backbone: nn.Module | None = None
        self.head_layers: HeadLayers | None = None
        self.metrics = nn.ModuleDict({stage: HeadMetrics(self.heads) for stage in EVAL_STAGES})
        self.losses = nn.ModuleDict({stage: MeanMetric(nan_strategy="disable") for stage in EVAL_STAGES})
        self.prediction_records: list[dict[str, Any]] = []
        self.record_predictions = False
        self.register_load_state_dict_pre_hook(rename_head_keys)
        self.after_build: Callable[[MemeClassifier], None] | None = None  # e.g. a run's weights, once built in partitions
        self.rgcl = RGCLSettings.of(self.hparams.rgcl)
        self.retrieval = RetrievalSettings.of(self.hparams.retrieval)
        if classify not in CLASSIFY:
            raise ValueError(f"model.classify must be one of {CLASSIFY}, got {classify!r}")
        self.classify = classify
        if (self.rgcl or classify == "retrieval") and any(not head.is_binary for head in self.heads.values()):
            raise ValueError(
                f"RGCL and retrieval classification need binary heads; {[n for n, h in self.heads.items() if not h.is_binary]} are not"
            )
        self.retrieval_bank: Bank | None = None  # the training memes' embeddings (src/crossmod/lib/callbacks/retrieval_bank.py)

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: str | Path, map_location: Any = None, strict: bool | None = None, **kwargs: Any
    ) -> MemeClassifier:
        """Lightning's loader, once the checkpoint's hyperparameters are checked: a checkpoint is data and
        may only name crossmod's own parts (src/crossmod/models/trusted_targets.py). Plain data only (weights_only)."""
        if kwargs.get("hparams_file") is not None:
            raise ValueError("hparams_file is not supported: a crossmod checkpoint carries its own (checked) hyperparameters")
        check_checkpoint(checkpoint_path)
        kwargs["weights_only"] = True
        return super().load_from_checkpoint(checkpoint_path, map_location=map_location, strict=strict, **kwargs)

    @classmethod
    def unbuilt_from_checkpoint(cls, checkpoint_path: str | Path) -> tuple[MemeClassifier, dict[str, torch.Tensor]]:
        """The checkpoint's classifier, not yet built, and its weights: for Lightning to build in partitions (ZeRO-3)
        before the weights go in. The checkpoint is checked and read as plain data, as `load_from_checkpoint` does."""
        check_checkpoint(checkpoint_path)
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        return cls(**checkpoint["hyper_parameters"]), checkpoint["state_dict"]

    def configure_model(self) -> None:
        """Build encoders, fusion and heads once (Lightning calls this inside the strategy's init context)."""
        if self.backbone is not None:
            return
        config = zero3_config(self._trainer.strategy if self._trainer is not None else None)
        if config is not None:  # kept alive with the model: Transformers holds it by weak reference
            self._transformers_zero3 = tell_transformers(config)
        encoders = {name: instantiate(self.hparams[name]) for name in ("text", "image") if self.hparams.get(name)}
        self.backbone = instantiate(self.hparams.fusion, **encoders)
        if getattr(self.backbone, "output_dim", None):  # late fusion owns its per-modality head layers
            self.head_layers = HeadLayers(self.backbone.output_dim, self.heads, self.hparams.head_dropout)
        elif self.rgcl is not None or self.classify == "retrieval":
            raise ValueError(f"{type(self.backbone).__name__} returns logits per modality, no shared meme embedding for RGCL or retrieval")
        if self.rgcl is not None and getattr(self.backbone, "embedding", None) == "output" and hasattr(self.backbone, "mlp"):
            rank_zero_warn(
                "RGCL reads the fusion MLP's output after its activation (model.fusion.embedding=output), whose cosine "
                "similarities cannot go below zero; model.fusion.embedding=pre_activation is RGCL's embedding (docs/retrieval.md)"
            )
        if config is not None:
            rank_zero_info(partition_summary(self.parameters(), self._trainer.global_rank, self._trainer.world_size))
        after_build, self.after_build = self.after_build, None
        if after_build is not None:
            after_build(self)

    def teardown(self, stage: str) -> None:
        """Say what the vision cache did in this stage (read, encoded, written) and what its folder holds."""
        cache = getattr(self.backbone, "vision_cache", None)
        if cache is not None:
            cache.end_stage(stage)

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Logits per head: a fusion returns features for the shared head layers, or (late fusion) logits itself;
        `classify=retrieval` scores by the nearest training memes instead (RGCL's kNN vote)."""
        if self.classify == "retrieval":
            return retrieval_logits(self.embed(batch), batch["ids"], self._bank(), self.retrieval.k, self.retrieval.weighting)
        return self._head_logits(batch)

    def _head_logits(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        output = self.backbone(batch)
        return output if isinstance(output, dict) else self.head_layers(self._head_input(output))

    def _head_input(self, features: torch.Tensor) -> torch.Tensor:
        """The head layers' input from the backbone's features (a backbone whose embedding stops before its last
        activation, e.g. CLIP fusion under RGCL, applies the rest in `head_input`)."""
        head_input = getattr(self.backbone, "head_input", None)
        return features if head_input is None else head_input(features)

    def embed(self, batch: dict[str, Any]) -> torch.Tensor:
        """The meme embedding RGCL and retrieval work in: the features the head layers read."""
        output = self.backbone(batch)
        if isinstance(output, dict):
            raise ValueError(f"{type(self.backbone).__name__} returns logits per modality, no shared meme embedding for RGCL or retrieval")
        return output

    def use_bank(self, bank: Bank) -> None:
        """The memes retrieval votes among and RGCL mines: the training memes under the current weights (built by
        src/crossmod/lib/callbacks/retrieval_bank.py in a run, by the loader for a finished one)."""
        self.retrieval_bank = bank

    def score_by_retrieval(self, bank: Bank, settings: RetrievalSettings) -> None:
        """Score by the nearest labelled memes of `bank` (an exported retrieval adapter's database), with the vote's
        `settings` (k, weighting), instead of the head layers."""
        self.classify, self.retrieval = "retrieval", settings
        self.use_bank(bank)

    def _bank(self) -> Bank:
        if self.retrieval_bank is not None and self.retrieval_bank.embeddings.device != self.device:
            self.retrieval_bank = self.retrieval_bank.to(self.device)  # once, on the first batch on another device
        if self.retrieval_bank is None:
            raise RuntimeError(
                "no retrieval bank: training builds it from the training memes (callbacks.retrieval_bank); to score a "
                "retrieval run later give evaluate.py its run dir (not a .ckpt), or export it with export.py kind=retrieval"
            )
        return self.retrieval_bank

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        """Each head's probabilities for the batch, with the memes' positions in the scored list (`index`), so
        predictions made on several processes can be put back in order (src/crossmod/lib/scoring.py)."""
        if getattr(self, "classify", "head") != "retrieval":  # a wrapper borrowing this step (ScoredAs) scores by its forward
            logits = self(batch)
            probabilities = {name: head.probabilities(logits[name].float()) for name, head in self.heads.items()}
            return {"index": batch["index"], "probabilities": probabilities}
        embeddings, bank, k = self.embed(batch), self._bank(), self.retrieval.k
        found = nearest(embeddings, batch["ids"], bank, k)  # one search: the vote and its explanation
        logits = votes(found, bank, self.retrieval.weighting)
        probabilities = {name: head.probabilities(logits[name].float()) for name, head in self.heads.items()}
        return {"index": batch["index"], "probabilities": probabilities, "neighbours": explain(found, bank)}

    def _loss(self, logits: dict[str, torch.Tensor], labels: dict[str, torch.Tensor]) -> torch.Tensor:
        losses = [masked_loss(logits[name], labels[name], head)[0] for name, head in self.heads.items()]
        return torch.stack(losses).mean()

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.rgcl is not None:
            return self._rgcl_step(batch)
        logits = self._head_logits(batch)  # the head trains; `classify` chooses how evaluation scores
        loss = self._loss(logits, batch["labels"])
        self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=len(batch["ids"]))
        return loss

    def _rgcl_step(self, batch: dict[str, Any]) -> torch.Tensor:
        """(1 − w)·cross-entropy + w·RGCL, both from one forward (RGCL's joint loss)."""
        features = self.embed(batch)
        cross_entropy = self._loss(self.head_layers(self._head_input(features)), batch["labels"])
        r = self.rgcl
        contrast = rgcl_objective(features, batch["labels"], batch["ids"], self._bank(), r.loss, r.temperature, r.margin, r.depth)
        loss = (1 - r.weight) * cross_entropy + r.weight * contrast
        size = len(batch["ids"])
        self.log_dict(
            {"train/loss": loss, "train/cross_entropy": cross_entropy, "train/rgcl": contrast},
            on_step=True,
            on_epoch=False,
            batch_size=size,
        )
        return loss

    def _eval_step(self, stage: str, batch: dict[str, Any]) -> None:
        logits = self(batch)
        if batch.get(FILLER):  # keeps ranks in lockstep (ZeRO-3); its samples are scored on their own rank
            return
        self.metrics[stage].update(logits, batch["labels"])
        self.losses[stage].update(self._loss(logits, batch["labels"]), len(batch["ids"]))
        if self.record_predictions:
            probs = {name: head.probabilities(logits[name].detach().float()) for name, head in self.heads.items()}
            self.prediction_records.append({"ids": batch["ids"], "probs": probs, "labels": batch["labels"]})

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step("test", batch)

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

    def export_adapter(self, directory: str | Path, write: bool = True) -> Path:
        """A VLM's LoRA adapter (PEFT files) plus the head layers' weights (`heads.safetensors`) and the
        heads' declaration (`heads.json`): what a fresh base model needs to reproduce this model's logits.

        Under ZeRO-3 every rank must call this (the trainable weights are gathered collectively); only
        the rank with `write=True` writes.
        """
        if not hasattr(self.backbone, "save_adapter"):
            raise ValueError(f"{type(self.backbone).__name__} has no adapter to export")
        directory = Path(directory)
        with gathered([p for p in self.parameters() if p.requires_grad]):
            if write:
                self.backbone.save_adapter(directory)
                if self.head_layers is not None:
                    weights = {k: v.detach().cpu().contiguous() for k, v in self.head_layers.state_dict().items()}
                    save_weights(weights, str(directory / "heads.safetensors"))
                (directory / "heads.json").write_text(json.dumps(self.hparams.heads, indent=1))
        return directory

    def load_adapter(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.backbone.load_adapter(directory)
        if self.head_layers is not None:
            self.head_layers.load_state_dict(load_file(str(directory / "heads.safetensors")))

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Optimizer groups: per-module learning rates (`param_groups` patterns, first match wins), and no
        weight decay for biases and norm weights."""
        rules = [(name, re.compile(rule["pattern"]), rule) for name, rule in (self.hparams.param_groups or {}).items()]
        weight_decay = float(self.hparams.optimizer.get("weight_decay", 0.0))
        buckets: dict[tuple[str, bool], list[nn.Parameter]] = {}
        for name, param in self.named_parameters():
            if not param.requires_grad:
                continue
            rule = next((r for r in rules if r[1].search(name)), None)
            no_decay = param.ndim < 2 or "norm" in name.lower()
            buckets.setdefault((rule[0] if rule else "default", no_decay), []).append(param)
        by_name = {name: rule for name, _, rule in rules}
        groups = []
        for (group, no_decay), params in buckets.items():
            rule = by_name.get(group, {})
            decay = float(rule.get("weight_decay", weight_decay))
            entry = {"params": params, "weight_decay": 0.0 if no_decay else decay, "name": f"{group}{'/no_decay' if no_decay else ''}"}
            if "lr" in rule:
                entry["lr"] = float(rule["lr"])
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

"""Every culture a server answers for, on as few forward passes as their exports allow.

Each exported culture folder is loaded through the one loader (`crossmod.artifacts.loading.load`: verified, data never
code), then the folders are sorted into *bodies*, one backbone each:
- exports of one run hold the same backbone (the same tensors, or the same LoRA adapter's, compared once loaded): they
  share it outright, and each culture adds only its head layers;
- LoRA exports of different runs over one base become named adapters of one PEFT model, and a batch runs every
  adapter at once as a mixed-adapter batch (PEFT's `adapter_names`: each row through its own adapter), one forward;
- an export that scores itself (a retrieval adapter, late fusion, a verbalizer) keeps its own model.
The rows a server answers with are `crossmod predict`'s rows (`crossmod.inference.scoring.prediction_rows`,
`with_actions`, the same disagreement), so the two agree on the same memes.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities import move_data_to_device

from crossmod.data.batches import SamplesToBatch
from crossmod.data.heads import Head
from crossmod.models.module import MemeClassifier

# model_config.json keys that do not change what a backbone computes on a batch (training settings, the heads)
TRAINING_ONLY = (
    "heads",
    "optimizer",
    "scheduler",
    "param_groups",
    "head_dropout",
    "layer_decay",
    "head_init",
    "objective",
    "retrieval",
    "scoring",
)
FIRST_ADAPTER = "default"  # PEFT's name for the adapter a model is built or loaded with


@dataclass
class Culture:
    """One exported culture: its head, its own head layers when it shares a backbone, its card's calibration and policy."""

    name: str
    folder: str
    card: dict[str, Any]
    head: Head
    head_layers: torch.nn.Module | None

    @property
    def calibrator(self) -> dict[str, Any] | None:
        from crossmod.evaluation.calibration import calibrator_of

        calibration = self.card.get("calibration") or {}
        return calibrator_of(calibration) if calibration else None

    @property
    def policy(self) -> dict[str, Any] | None:
        return self.card.get("policy") or None


@dataclass
class Body:
    """One backbone and the cultures that read it, by PEFT adapter name (None: no adapter to choose); `shared`: the
    cultures' head layers read its features (False: one culture whose model scores the batch itself)."""

    model: MemeClassifier
    adapters: dict[str | None, list[Culture]] = field(default_factory=dict)
    shared: bool = True
    family: str = ""  # `_family_key` of its exports

    @property
    def cultures(self) -> list[Culture]:
        return [culture for group in self.adapters.values() for culture in group]


def _family_key(folder: Path, card: Mapping[str, Any]) -> str:
    """What must be equal for two exports to run on one backbone, as their files say it: the family config without heads,
    LoRA and training settings, and the base by name, revision and content hash (two shipped bases under one folder
    name are told apart by `base_provenance`). The tensors are compared too (`_same`) before anything is shared."""
    config = json.loads((folder / "model_config.json").read_text(encoding="utf-8"))
    kept = {k: v for k, v in config.items() if k not in TRAINING_ONLY}
    fusion = kept.get("fusion")
    if isinstance(fusion, dict):
        kept["fusion"] = {k: v for k, v in fusion.items() if k not in ("heads", "lora")}
    preprocessor = kept.get("preprocessor")
    if isinstance(preprocessor, dict):
        kept["preprocessor"] = {k: v for k, v in preprocessor.items() if k != "heads"}
    base = {key: card.get(key) for key in ("format", "base_model", "base_revision", "base_provenance")}
    return json.dumps([kept, base], sort_keys=True, default=str)


def _backbone_state(model: MemeClassifier, adapter_weights: bool = True) -> dict[str, torch.Tensor]:
    """The backbone's tensors; without `adapter_weights`, only the base's (no LoRA factors, no adapter's own module copies)."""
    state = model.backbone.state_dict()  # type: ignore[union-attr]
    return state if adapter_weights else {k: v for k, v in state.items() if "lora_" not in k and "modules_to_save" not in k}


def _same(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)


def _shares_heads(model: MemeClassifier, card: Mapping[str, Any]) -> bool:
    """Whether the culture's own head layers on a shared backbone's features give its scores (the head rule on
    features; not a retrieval vote, late fusion or a verbalizer, which score with the whole model)."""
    return card.get("kind", "head") == "head" and model.scoring.name == "head" and model.head_layers is not None


class ServedCultures:
    """The loaded cultures, sorted into bodies; `rows(records)` scores memes for every culture, as predict does."""

    def __init__(self, bodies: list[Body], threshold: float, disagreement: str) -> None:
        self.bodies, self.threshold, self.disagreement = bodies, threshold, disagreement
        self.cultures = [culture for body in bodies for culture in body.cultures]

    @classmethod
    def load(
        cls, folders: list[str], bases: Mapping[str, str | None] | None = None, threshold: float = 0.5, disagreement: str = "spread"
    ) -> ServedCultures:
        """Load every folder (one at a time), keeping one backbone per body. Two folders of one culture are refused."""
        from crossmod.artifacts.loading import load

        bodies: list[Body] = []
        seen: dict[str, str] = {}
        for reference in folders:
            folder = Path(reference)
            model, info = load(folder, bases=bases, expect="culture", command=f"crossmod serve adapters=[{folder},…]")
            card = info["card"]
            name = card["culture"]
            if name in seen:
                raise ValueError(f"{folder} and {seen[name]} are both exports of culture {name}: serve each culture once")
            seen[name] = str(folder)
            if not _shares_heads(model, card):
                bodies.append(Body(model, {None: [Culture(name, str(folder), card, model.heads[name], None)]}, shared=False))
                continue
            culture, family = Culture(name, str(folder), card, model.heads[name], model.head_layers), _family_key(folder, card)
            lora = card["format"] == "peft-lora"
            candidates = [body for body in bodies if body.shared and body.family == family]
            if lora:  # which adapter of a body, if any, holds exactly this culture's LoRA weights
                mine = _adapter_state(model, FIRST_ADAPTER)
                found = next(((b, a) for b in candidates for a in b.adapters if _same(_adapter_state(b.model, a), mine)), None)
            else:
                found = next(((b, None) for b in candidates if _same(_backbone_state(b.model), _backbone_state(model))), None)
            if found is not None:  # one run's backbone: its head layers are all this culture adds
                body, adapter = found
                body.adapters[adapter].append(culture)
                continue
            same_base = next((b for b in candidates if lora and _same(_backbone_state(b.model, False), _backbone_state(model, False))), None)
            if same_base is not None:  # another run's adapter over the same base: one more named adapter of its PEFT model
                same_base.adapters[_add_adapter(same_base.model, model, f"adapter{len(same_base.adapters)}")] = [culture]
                continue
            bodies.append(Body(model, {FIRST_ADAPTER if lora else None: [culture]}, family=family))
        return cls(bodies, threshold, disagreement)

    def to(self, device: torch.device | str) -> ServedCultures:
        for body in self.bodies:
            body.model.to(device)
        return self

    @property
    def device(self) -> torch.device:
        return self.bodies[0].model.device

    @property
    def needs(self) -> frozenset[str]:
        """The inputs some culture's model reads (`text`, `image`)."""
        return frozenset().union(*(body.model.preprocessor.needs for body in self.bodies))

    def forwards(self) -> int:
        """Forward passes per batch: one per body."""
        return len(self.bodies)

    @torch.inference_mode()
    def probabilities(self, records: list[dict[str, Any]]) -> tuple[dict[str, list[list[float]]], dict[str, list[Any]]]:
        """Each culture's probabilities per meme (a list per meme, as predict's scores), and a retrieval culture's neighbours."""
        scores: dict[str, list[list[float]]] = {}
        neighbours: dict[str, list[Any]] = {}
        for body in self.bodies:
            names = list(body.adapters)
            rows = records * len(names)  # one block of rows per adapter: a mixed-adapter batch
            batch = SamplesToBatch(body.model.preprocessor)(rows)
            batch["index"] = torch.arange(len(rows))
            batch = move_data_to_device(batch, body.model.device)
            if not body.shared:
                output = body.model.predict_step(batch, 0)
                (culture,) = body.cultures
                scores[culture.name] = output["probabilities"][culture.name].reshape(len(records), -1).tolist()
                if "neighbours" in output:
                    neighbours[culture.name] = [row.get(culture.name) for row in _per_row(output["neighbours"], len(records))]
                continue
            features = _features(body, batch, [name for name in names for _ in records])
            for block, name in enumerate(names):
                rows_of = features[block * len(records) : (block + 1) * len(records)]
                for culture in body.adapters[name]:
                    logits = culture.head_layers(body.model.backbone.head_input(rows_of))[culture.name]  # type: ignore[misc]
                    scores[culture.name] = culture.head.probabilities(logits.float()).reshape(len(records), -1).tolist()
        return scores, neighbours

    def rows(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`crossmod predict`'s row per meme for every culture (probability, decision, calibrated probability, policy
        action, neighbours) and, with two cultures or more, their disagreement."""
        from crossmod.inference.scoring import prediction_rows, with_actions

        scores, neighbours = self.probabilities(records)
        merged: list[dict[str, Any]] = [{"id": record["id"]} for record in records]
        for culture in self.cultures:
            per_meme = [{culture.name: values} for values in scores[culture.name]]
            explained = [{culture.name: n} if n else None for n in neighbours[culture.name]] if culture.name in neighbours else None
            calibrators = {culture.name: culture.calibrator} if culture.calibrator else None
            rows = prediction_rows(records, per_meme, {culture.name: culture.head}, self.threshold, explained, calibrators)
            if culture.policy:
                with_actions(rows, culture.name, culture.policy)
            for target, row in zip(merged, rows, strict=True):
                target.update(row)
        binary = [c.name for c in self.cultures if c.head.is_binary]
        if len(binary) > 1:
            from crossmod.evaluation.abstention import disagreement

            spread = disagreement({name: [row[f"{name}_probability"] for row in merged] for name in binary}, self.disagreement)
            for row, value in zip(merged, spread.tolist(), strict=True):
                row["disagreement"] = value
        return merged


def _features(body: Body, batch: dict[str, Any], adapter_names: list[str | None]) -> torch.Tensor:
    """The backbone's features for the batch, each row through its adapter (one forward); one adapter: no hooks."""
    model = body.model
    if len(body.adapters) == 1:
        return model.embed(batch)
    peft_model = model.backbone.model  # type: ignore[union-attr]
    # PEFT's mixed-adapter batches: PeftModel.forward(adapter_names=…) wraps its forward in this context, which hands
    # each LoRA layer the rows' adapter names; the classifier calls the inner model (no LM head), so it enters it here
    with peft_model.base_model._enable_peft_forward_hooks(adapter_names=adapter_names):
        return model.embed(batch)


def _adapter_state(model: MemeClassifier, adapter: str | None) -> dict[str, torch.Tensor]:
    """One PEFT adapter's tensors (what its adapter file holds)."""
    from peft import get_peft_model_state_dict

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Could not find a config file", category=UserWarning)  # see _add_adapter
        return get_peft_model_state_dict(model.backbone.model, adapter_name=adapter)  # type: ignore[union-attr]


def _add_adapter(into: MemeClassifier, source: MemeClassifier, name: str) -> str:
    """`source`'s LoRA adapter as adapter `name` of `into`'s PEFT model (same base), checked tensor for tensor."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    target, loaded = into.backbone.model, source.backbone.model  # type: ignore[union-attr]
    target.add_adapter(name, loaded.peft_config[FIRST_ADAPTER])
    with warnings.catch_warnings():
        # PEFT looks for the base's config.json to see whether embeddings were resized; an export names its base by a
        # relative folder it ships, which PEFT cannot find from here, and the tensors are compared one by one below
        warnings.filterwarnings("ignore", message="Could not find a config file", category=UserWarning)
        state = get_peft_model_state_dict(loaded, adapter_name=FIRST_ADAPTER)
        set_peft_model_state_dict(target, state, adapter_name=name)
        placed = get_peft_model_state_dict(target, adapter_name=name)
    if set(placed) != set(state) or any(not torch.equal(placed[k], state[k].to(placed[k].device)) for k in state):
        raise ValueError(f"culture {name}: its adapter does not fit the shared base's PEFT model")
    target.set_adapter(FIRST_ADAPTER)  # the adapter a plain forward uses stays the first one's
    target.eval()
    return name


def _per_row(neighbours: Any, count: int) -> list[dict[str, Any]]:
    """A retrieval step's neighbours per meme (as `crossmod.inference.scoring` splits a step's fields)."""
    from crossmod.inference.scoring import row_of

    return [row_of(neighbours, row) for row in range(count)]

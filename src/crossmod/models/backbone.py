"""The backbone contract: what `MemeClassifier` asks of the module its `model.fusion` config builds.

Every fusion (text, image, concat, early, late, VisualBERT, CLIP, VLM) declares it by subclassing `Backbone`, which
gives the defaults; the classifier checks it once when it builds the backbone, and never probes for attributes.
A VLM also declares `Adapters` (what `export` writes and a fresh base loads back) and `Generative` (the Transformers
model behind it, for generation, a merged export and the base's revision).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

EMBEDDING_AFTER_ACTIVATION = (
    "RGCL reads the fusion MLP's output after its activation (model.fusion.embedding=output), whose cosine "
    "similarities cannot go below zero; model.fusion.embedding=pre_activation is RGCL's embedding (docs/retrieval.md)"
)


@runtime_checkable
class Backbone(Protocol):
    """`output_dim`: the width of the meme features `forward` returns, which the classifier's shared head layers read;
    None: `forward` returns logits per head itself (late fusion, a VLM scoring with its verbalizer), so there is no
    shared meme embedding for RGCL or retrieval. `vision_cache`: a VLM's store of image features, told when a stage
    ends; None elsewhere."""

    output_dim: int | None = None
    vision_cache: Any = None

    def forward(self, batch: dict[str, Any]) -> torch.Tensor | dict[str, torch.Tensor]: ...

    def head_input(self, features: torch.Tensor) -> torch.Tensor:
        """The head layers' input from the features `forward` returns: the same, unless the embedding stops before the
        MLP's last activation (RGCL's `embedding=pre_activation`), whose rest is applied here."""
        return features

    def embedding_caveat(self) -> str | None:
        """Why this backbone's embedding is a poor one for RGCL, if it is (warned once when RGCL trains on it)."""
        return None


@runtime_checkable
class Adapters(Protocol):
    """A backbone whose trained part is a PEFT adapter: exported on its own and loaded back onto a fresh base."""

    def save_adapter(self, directory: str | Path) -> Path: ...

    def load_adapter(self, directory: str | Path) -> None: ...


@runtime_checkable
class Generative(Protocol):
    """A backbone around a Transformers image-text-to-text model: zero-shot answers, `export merge=true` and the card's
    base revision read it."""

    def base_model(self) -> torch.nn.Module:
        """The ForConditionalGeneration model (inside the PEFT wrapper when there is one)."""
        ...


def checked_backbone(backbone: Any) -> Backbone:
    """`backbone` if it declares the contract; otherwise an error naming the class and the config key that built it."""
    if not isinstance(backbone, Backbone):
        raise TypeError(
            f"model.fusion built a {type(backbone).__name__}, which does not declare crossmod.models.backbone.Backbone "
            "(output_dim, vision_cache, forward, head_input, embedding_caveat): subclass it"
        )
    return backbone

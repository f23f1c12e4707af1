"""CLIP fusion (Hate-CLIPper): CLIP's text and image embeddings combined by feature interaction.

Both embeddings pass a trainable projection and are L2-normalised; `cross` takes their outer
product (the feature interaction matrix, projection_dim² features), `align` their element-wise
product; an MLP follows. CLIP itself is frozen by default, as in the study.

RGCL (Mei et al., ACL 2024) runs this model with its own settings, all options here: `features=pooled` (CLIP's
pooled outputs before its projections, 1024 image / 768 text for ViT-L/14, as its code reads them), ReLU layers,
separate dropouts after the projections, before the MLP and inside it, and `embedding=pre_activation`: the meme
embedding RGCL and retrieval work in is the last hidden layer before its activation, and the head reads that layer
after its activation and dropout (`head_input`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoModel

from crossmod.models.backbone import Backbone
from crossmod.models.fusion import check_embedding, mlp, mlp_caveat, mlp_embedding, mlp_head_input
from crossmod.models.model_folders import refuse_shipped_code

FEATURES = ("projected", "pooled")
ACTIVATIONS = ("gelu", "relu")


def _features(output: torch.Tensor | object) -> torch.Tensor:
    """`get_*_features` returns a tensor (older transformers) or an output whose pooler_output is projected."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


class CLIPFusion(nn.Module, Backbone):
    def __init__(
        self,
        name_or_path: str,
        interaction: str = "cross",
        projection_dim: int = 64,
        hidden_dim: int = 512,
        num_layers: int = 1,
        dropout: float = 0.1,
        freeze: bool = True,
        features: str = "projected",
        activation: str = "gelu",
        projection_dropout: float | None = None,
        fusion_dropout: float = 0.0,
        embedding: str = "output",
    ) -> None:
        """`dropout`: inside the MLP (and after the projections unless `projection_dropout` is given); `fusion_dropout`:
        on the fused features before the MLP; `features`: `projected` (CLIP's joint space) or `pooled` (before it)."""
        super().__init__()
        if interaction not in ("cross", "align"):
            raise ValueError(f"clip_fusion interaction must be 'cross' or 'align', got {interaction!r}")
        for name, value, allowed in (
            ("features", features, FEATURES),
            ("activation", activation, ACTIVATIONS),
        ):
            if value not in allowed:
                raise ValueError(f"clip_fusion {name} must be one of {allowed}, got {value!r}")
        check_embedding("clip_fusion", embedding, num_layers)
        refuse_shipped_code(name_or_path)
        self.clip = AutoModel.from_pretrained(name_or_path, trust_remote_code=False)
        self.clip.train()
        if freeze:
            self.clip.requires_grad_(False)
        self.features = features
        config = self.clip.config
        text_width, image_width = (
            (config.projection_dim, config.projection_dim)
            if features == "projected"
            else (config.text_config.hidden_size, config.vision_config.hidden_size)
        )
        d0 = dropout if projection_dropout is None else projection_dropout
        self.text_projection = nn.Sequential(nn.Linear(text_width, projection_dim), nn.Dropout(d0))
        self.image_projection = nn.Sequential(nn.Linear(image_width, projection_dim), nn.Dropout(d0))
        self.interaction = interaction
        fused = projection_dim * projection_dim if interaction == "cross" else projection_dim
        self.fusion_dropout = nn.Dropout(fusion_dropout)
        self.mlp, self.output_dim = mlp(fused, hidden_dim, num_layers, dropout, activation)
        self.embedding = embedding  # pre_activation: forward stops before the last activation and dropout

    def _clip_features(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.features == "projected":
            text = _features(self.clip.get_text_features(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]))
            return text, _features(self.clip.get_image_features(pixel_values=batch["pixel_values"]))
        text = self.clip.text_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).pooler_output
        return text, self.clip.vision_model(pixel_values=batch["pixel_values"]).pooler_output

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        text, image = self._clip_features(batch)
        text = F.normalize(self.text_projection(text), dim=-1)
        image = F.normalize(self.image_projection(image), dim=-1)
        fused = torch.einsum("bi,bj->bij", image, text).flatten(1) if self.interaction == "cross" else image * text
        fused = self.fusion_dropout(fused)
        return mlp_embedding(self.mlp, fused, self.embedding)

    def head_input(self, features: torch.Tensor) -> torch.Tensor:
        """What the head layers read from `forward`'s features (the last activation and dropout under pre_activation)."""
        return mlp_head_input(self.mlp, features, self.embedding)

    def embedding_caveat(self) -> str | None:
        return mlp_caveat(self.embedding)

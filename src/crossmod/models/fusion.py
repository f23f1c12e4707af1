"""Model families over the encoders: text only, image only, late, concat and early (MMBT-style) fusion.

Each takes the collated batch and returns one feature vector per item for the shared head layers, except
late fusion, whose per-modality classifiers' probabilities are averaged (returned as the logits of that
average, so the loss and the metrics read them like any head's logits).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from crossmod.data.heads import Head, HeadSpecs, parse_heads
from crossmod.models.backbone import EMBEDDING_AFTER_ACTIVATION, Backbone
from crossmod.models.backbones.image import TimmImageEncoder
from crossmod.models.backbones.text import HFTextEncoder
from crossmod.models.heads import HeadLayers

EMBEDDINGS = ("output", "pre_activation")


def check_embedding(family: str, embedding: str, num_layers: int) -> None:
    """`embedding`: the meme embedding RGCL and retrieval work in. `output`: what the MLP returns (after its last activation
    and dropout); `pre_activation`: its last hidden layer before the activation (RGCL's choice: a post-ReLU/GELU vector
    is nearly non-negative, so its cosine similarities cannot go below zero), and the head reads it after both."""
    if embedding not in EMBEDDINGS:
        raise ValueError(f"{family} embedding must be one of {EMBEDDINGS}, got {embedding!r}")
    if embedding == "pre_activation" and num_layers < 1:
        raise ValueError(f"{family} embedding=pre_activation needs num_layers >= 1 (the embedding is the last hidden layer)")


def mlp_embedding(layers: nn.Sequential, x: torch.Tensor, embedding: str) -> torch.Tensor:
    """The MLP's output, or (pre_activation) its last hidden layer before the activation and dropout."""
    return layers[:-2](x) if embedding == "pre_activation" else layers(x)


def mlp_head_input(layers: nn.Sequential, features: torch.Tensor, embedding: str) -> torch.Tensor:
    """What the head layers read from `mlp_embedding`'s features: the rest of the MLP (activation, dropout), or nothing."""
    return layers[-2:](features) if embedding == "pre_activation" else features


def mlp_caveat(embedding: str) -> str | None:
    """RGCL's caveat for an MLP embedding read after its activation (`Backbone.embedding_caveat`)."""
    return EMBEDDING_AFTER_ACTIVATION if embedding == "output" else None


def mlp(width: int, hidden_dim: int, num_layers: int, dropout: float, activation: str = "gelu") -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for _ in range(num_layers):
        layers += [nn.Linear(width, hidden_dim), nn.ReLU() if activation == "relu" else nn.GELU(), nn.Dropout(dropout)]
        width = hidden_dim
    return nn.Sequential(*layers), width


class TextOnly(nn.Module, Backbone):
    def __init__(self, text: HFTextEncoder) -> None:
        super().__init__()
        self.text = text
        self.output_dim = text.output_dim

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.text(batch["input_ids"], batch["attention_mask"])


class ImageOnly(nn.Module, Backbone):
    def __init__(self, image: nn.Module) -> None:
        super().__init__()
        self.image = image
        self.output_dim = image.output_dim

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.image(batch["pixel_values"])


class ConcatFusion(nn.Module, Backbone):
    """Pooled text ‖ pooled image → MLP: the Hateful Memes "Concat BERT" family."""

    def __init__(
        self,
        text: HFTextEncoder,
        image: nn.Module,
        hidden_dim: int = 256,
        num_layers: int = 2,
        dropout: float = 0.1,
        embedding: str = "output",
    ) -> None:
        super().__init__()
        check_embedding("concat", embedding, num_layers)
        self.text, self.image, self.embedding = text, image, embedding
        # Each modality is normalised before concatenation so neither dominates by scale alone.
        self.text_norm, self.image_norm = nn.LayerNorm(text.output_dim), nn.LayerNorm(image.output_dim)
        self.mlp, self.output_dim = mlp(text.output_dim + image.output_dim, hidden_dim, num_layers, dropout)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        text = self.text(batch["input_ids"], batch["attention_mask"])
        image = self.image(batch["pixel_values"])
        return mlp_embedding(self.mlp, torch.cat([self.text_norm(text), self.image_norm(image)], dim=-1), self.embedding)

    def head_input(self, features: torch.Tensor) -> torch.Tensor:
        return mlp_head_input(self.mlp, features, self.embedding)

    def embedding_caveat(self) -> str | None:
        return mlp_caveat(self.embedding)


COMBINE = ("probabilities", "logits")


def mean_probability_logits(a: torch.Tensor, b: torch.Tensor, head: Head) -> torch.Tensor:
    """Logits whose probabilities are the mean of `a`'s and `b`'s (computed in log space, stable at any scale):
    log-softmax of the mean for a multiclass head, log p − log(1 − p) of the mean sigmoid otherwise."""
    if head.kind == "multiclass":
        return torch.logsumexp(torch.stack([a.log_softmax(-1), b.log_softmax(-1)]), 0) - math.log(2)
    log_p = torch.logsumexp(torch.stack([F.logsigmoid(a), F.logsigmoid(b)]), 0)
    log_not_p = torch.logsumexp(torch.stack([F.logsigmoid(-a), F.logsigmoid(-b)]), 0)
    return log_p - log_not_p


class LateFusion(nn.Module, Backbone):
    """A text classifier and an image classifier trained together; their predictions are averaged.

    No cross-modal interaction before the output, which is what separates it from concat fusion.
    `combine`: `probabilities` (the Hateful Memes study's late fusion: the mean of the two classifiers'
    probabilities) or `logits` (the mean of their logits; a deviation, for comparison).
    """

    output_dim = None  # returns logits: the module's shared head layers are not used

    def __init__(
        self,
        text: HFTextEncoder,
        image: nn.Module,
        heads: HeadSpecs,
        hidden_dim: int = 256,
        num_layers: int = 1,
        dropout: float = 0.1,
        head_dropout: float = 0.0,
        combine: str = "probabilities",
    ) -> None:
        super().__init__()
        if combine not in COMBINE:
            raise ValueError(f"late fusion combine must be one of {COMBINE}, got {combine!r}")
        self.text, self.image, self.combine = text, image, combine
        self.text_mlp, text_width = mlp(text.output_dim, hidden_dim, num_layers, dropout)
        self.image_mlp, image_width = mlp(image.output_dim, hidden_dim, num_layers, dropout)
        typed = self.heads = parse_heads(heads)
        self.text_head_layers = HeadLayers(text_width, typed, head_dropout)
        self.image_head_layers = HeadLayers(image_width, typed, head_dropout)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        text = self.text_head_layers(self.text_mlp(self.text(batch["input_ids"], batch["attention_mask"])))
        image = self.image_head_layers(self.image_mlp(self.image(batch["pixel_values"])))
        if self.combine == "logits":
            return {name: (text[name] + image[name]) / 2 for name in text}
        return {name: mean_probability_logits(text[name], image[name], head) for name, head in self.heads.items()}


class EarlyFusion(nn.Module, Backbone):
    """MMBT-style: image region vectors, projected to the text model's width, enter its input sequence.

    Sequence = [image tokens (K)] + [text tokens]. Image tokens get their own positions (0..K-1, like
    MMBT's separate modality positions), a learned modality embedding, and segment id 1 where the
    text model has two segment types (BERT); RoBERTa-style position ids are offset past padding.
    """

    def __init__(self, text: HFTextEncoder, image: TimmImageEncoder, num_image_tokens: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        self.text, self.image, self.num_image_tokens = text, image, num_image_tokens
        config = text.model.config
        self.projection = nn.Sequential(nn.Linear(image.output_dim, config.hidden_size), nn.Dropout(dropout))
        self.modality = nn.Parameter(torch.zeros(config.hidden_size))
        self.image_segment = 1 if getattr(config, "type_vocab_size", 1) > 1 else 0
        padding_idx = getattr(text.model.embeddings, "padding_idx", None)
        self.position_offset = padding_idx + 1 if padding_idx is not None else 0
        self.output_dim = text.output_dim

    def _positions(self, length: int, batch: int, device: torch.device) -> torch.Tensor:
        return (torch.arange(length, device=device) + self.position_offset).expand(batch, length)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        input_ids, text_mask = batch["input_ids"], batch["attention_mask"]
        size, k, length = input_ids.shape[0], self.num_image_tokens, input_ids.shape[1]
        image = self.projection(self.image.tokens(batch["pixel_values"], k)) + self.modality
        words = self.text.model.get_input_embeddings()(input_ids)
        embeds = torch.cat([image.to(words.dtype), words], dim=1)
        mask = torch.cat([text_mask.new_ones(size, k), text_mask], dim=1)
        segments = torch.cat([input_ids.new_full((size, k), self.image_segment), torch.zeros_like(input_ids)], dim=1)
        positions = torch.cat([self._positions(k, size, input_ids.device), self._positions(length, size, input_ids.device)], dim=1)
        hidden = self.text.model(
            inputs_embeds=embeds, attention_mask=mask, token_type_ids=segments, position_ids=positions
        ).last_hidden_state
        return self.text.pool(hidden[:, k:], text_mask)

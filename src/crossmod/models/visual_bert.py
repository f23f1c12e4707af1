"""Visual BERT: one transformer over [text tokens] + [visual tokens] (the Hateful Memes study's "Visual BERT COCO").

Transformers' `VisualBertModel` is loaded with `from_pretrained` (a hub id such as `uclanlp/visualbert-vqa-coco-pre`
or a local folder) and fine-tuned end to end with the image backbone. The features for the head layers follow the
study's classifier (MMF's VisualBERT classification head): the pooled [CLS] output, the transformer's own dropout,
then BERT's prediction-head transform (dense → GELU → LayerNorm).

Named difference from the study: **grid features instead of detector regions**. The study's visual tokens were
100 Faster R-CNN region features (2048-d each); crossmod has no detector, so the visual tokens are the image
backbone's feature map average-pooled to `num_regions` grid cells (`TimmImageEncoder.tokens`), projected by
VisualBERT's own `visual_projection`. The checkpoint's `visual_embedding_dim` must therefore equal the backbone's
channel count (2048 for ResNet-152 and the uclanlp checkpoints).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import VisualBertModel

from crossmod.models.backbone import Backbone
from crossmod.models.backbones.image import TimmImageEncoder
from crossmod.models.model_folders import refuse_shipped_code


class VisualBertFusion(nn.Module, Backbone):
    """Text ids and image grid vectors through VisualBERT; returns one feature vector per meme for the head layers.

    `visual_token_type`: the segment id of the visual tokens in VisualBERT's visual token-type table. 0 is what
    the original VisualBERT code and MMF (which ran the study) use; Transformers' own default is 1.
    `classifier_transform`: BERT's prediction-head transform before the head layers, as in the study's classifier.
    """

    def __init__(
        self,
        name_or_path: str,
        image: TimmImageEncoder,
        num_regions: int = 100,
        visual_token_type: int = 0,
        classifier_transform: bool = True,
    ) -> None:
        super().__init__()
        refuse_shipped_code(name_or_path)
        self.visual_bert = VisualBertModel.from_pretrained(name_or_path, trust_remote_code=False)
        self.visual_bert.train()  # from_pretrained returns eval mode; Lightning keeps whatever mode it finds
        config = self.visual_bert.config
        if config.visual_embedding_dim != image.output_dim:
            backbone = getattr(image.model, "pretrained_cfg", {}).get("architecture") or type(image.model).__name__
            raise ValueError(
                f"VisualBERT {name_or_path!r} projects visual_embedding_dim={config.visual_embedding_dim} features, but the "
                f"image backbone {backbone} gives {image.output_dim} channels: choose a backbone with "
                f"{config.visual_embedding_dim} channels (model.image.model_name) or a checkpoint built for {image.output_dim}"
            )
        if not 0 <= visual_token_type < config.type_vocab_size:
            raise ValueError(f"visual_token_type must be in 0..{config.type_vocab_size - 1}, got {visual_token_type}")
        if num_regions < 1:
            raise ValueError(f"num_regions must be at least 1, got {num_regions}")
        self.image, self.num_regions, self.visual_token_type = image, num_regions, visual_token_type
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        width = config.hidden_size
        self.transform = (
            nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width, eps=config.layer_norm_eps))
            if classifier_transform
            else nn.Identity()
        )
        self.output_dim = width

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        input_ids, text_mask = batch["input_ids"], batch["attention_mask"]
        regions = self.image.tokens(batch["pixel_values"], self.num_regions)
        visual_shape = regions.shape[:2]
        output = self.visual_bert(
            input_ids=input_ids,
            attention_mask=text_mask,
            token_type_ids=torch.zeros_like(input_ids),
            visual_embeds=regions,
            visual_attention_mask=text_mask.new_ones(visual_shape),
            visual_token_type_ids=input_ids.new_full(visual_shape, self.visual_token_type),
        )
        return self.transform(self.dropout(output.pooler_output))

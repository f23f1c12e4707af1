"""TagGenerator: a VLM fine-tuned with LoRA to write a meme's social tags (ToxicTags' tag generator).

Training minimises the language-model loss of the answer "tag1, tag2, …" alone (`TagPreprocessor` masks
prompt, image tokens and padding with -100). Validation logs that loss (`val/loss`). The test stage
logs it too, and writes tags for every test meme by greedy generation (`generation.max_new_tokens`),
scores them against the gold tags by tag similarity (`crossmod.evaluation.tag_similarity`: each gold tag's best
cosine match among the generated tags, mean over gold tags, then over memes; embeddings from the
sentence-transformers model `similarity.model`) and logs `test/tags/similarity` with the counts
`test/tags/{memes,scored,no_gold,empty}`. The generated rows wait in `generated_tags` for the
`TagWriter` callback (src/crossmod/training/callbacks/tag_writer.py), which writes them to `<run dir>/tags/`.

Everything else is the meme classifier's: the backbone (`VLMClassifier` in `generate` mode) is built in
`configure_model`, optimizer groups and schedule, adapter export, and the checks on loaded checkpoints.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
import torch
from torch import nn
from torchmetrics import MeanMetric, SumMetric

from crossmod.data.even_batches import FILLER
from crossmod.evaluation.tag_similarity import meme_tag_similarity
from crossmod.models.module import MemeClassifier
from crossmod.models.sentence_embedder import SentenceEmbedder
from crossmod.models.sharding import is_zero3
from crossmod.models.vlm.tag_preprocess import parse_tags, prompt_only

COUNTS = ("memes", "scored", "no_gold", "empty")


class TagGenerator(MemeClassifier):
    def __init__(
        self,
        fusion: dict[str, Any],
        preprocessor: dict[str, Any],
        heads: dict[str, dict[str, Any]],
        optimizer: dict[str, Any],
        generation: dict[str, Any],
        similarity: dict[str, Any],
        scheduler: dict[str, Any] | None = None,
        param_groups: dict[str, dict[str, Any]] | None = None,
        **classifier_settings: Any,
    ) -> None:
        """`generation`: {max_new_tokens}; `similarity`: {model, batch_size, device} of the tag embeddings.
        `heads` are the dataset's (the batches carry their labels); none is predicted. `classifier_settings`:
        the meme classifier's other arguments (name_or_path, family …), as a checkpoint's hyperparameters hold them."""
        if fusion.get("mode") != "generate":
            raise ValueError(f"the tag generator writes text: model.fusion.mode must be 'generate', got {fusion.get('mode')!r}")
        super().__init__(
            fusion=fusion,
            preprocessor=preprocessor,
            heads=heads,
            optimizer=optimizer,
            scheduler=scheduler,
            param_groups=param_groups,
            **classifier_settings,
        )
        self.save_hyperparameters({"generation": dict(generation), "similarity": dict(similarity)}, logger=False)
        self.max_new_tokens = int(generation["max_new_tokens"])
        self.embedder = SentenceEmbedder(similarity["model"], similarity.get("batch_size", 64), similarity.get("device"))
        self.metrics = nn.ModuleDict()  # no head is predicted: the scores are the answer loss and the tag similarity
        self.tag_similarity = MeanMetric(nan_strategy="disable")
        self.tag_counts = nn.ModuleDict({name: SumMetric() for name in COUNTS})
        self.generated_tags: list[dict[str, Any]] = []

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        """The language-model loss of the batch's answer tokens."""
        return self.backbone(batch)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self(batch)
        size = len(batch["ids"])
        self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=size)
        self.log(
            "train/truncated_answers", float(batch["answer"]["truncated"]), on_step=False, on_epoch=True, reduce_fx="sum", batch_size=size
        )
        return loss

    def score(self, gold: list[list[str]], generated: list[list[str]]) -> list[float | None]:
        """Tag similarity of each meme (None: no gold tags), every distinct tag of the batch embedded once."""
        texts = sorted(set(chain(*gold, *generated)))
        vectors = self.embedder.encode(texts)
        row = {text: index for index, text in enumerate(texts)}

        def rows(tags: list[str]) -> np.ndarray:
            return vectors[[row[tag] for tag in tags]]

        return [meme_tag_similarity(rows(g), rows(t)) for g, t in zip(gold, generated)]

    @torch.no_grad()
    def generate_tags(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        """Greedy tags for every meme of a collated batch, with their tag similarity to its gold tags."""
        tokenizer = self.preprocessor.processor.tokenizer
        strategy = self._trainer.strategy if self._trainer is not None else None
        new_tokens = self.backbone.generate(
            prompt_only(batch, self.preprocessor.pad_token_id),
            self.max_new_tokens,
            self.preprocessor.pad_token_id,
            synced_gpus=is_zero3(strategy),  # sharded forwards are collectives: every rank steps until all are done
        )
        generated = [parse_tags(text) for text in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]
        scores = self.score(batch["gold_tags"], generated)
        return [
            {"id": meme, "tags": tags, "gold_tags": len(gold), "similarity": score}
            for meme, tags, gold, score in zip(batch["ids"], generated, batch["gold_tags"], scores)
        ]

    def _eval_step(self, stage: str, batch: dict[str, Any]) -> None:
        loss = self(batch)
        rows = self.generate_tags(batch) if stage == "test" else []
        if batch.get(FILLER):  # keeps ranks in lockstep (ZeRO-3); its memes are scored on their own rank
            return
        self.losses[stage].update(loss, len(batch["ids"]))
        for row in rows:
            scored = row["similarity"] is not None
            if scored:
                self.tag_similarity.update(row["similarity"])
            for name, value in zip(COUNTS, (1, scored, not scored, scored and not row["tags"])):
                self.tag_counts[name].update(float(value))
        self.generated_tags.extend(rows)

    def _log_epoch_metrics(self, stage: str) -> None:
        results = {"loss": self.losses[stage].compute()}
        self.losses[stage].reset()
        if stage == "test":
            results["tags/similarity"] = self.tag_similarity.compute()
            results |= {f"tags/{name}": metric.compute() for name, metric in self.tag_counts.items()}
            self.tag_similarity.reset()
            for metric in self.tag_counts.values():
                metric.reset()
        self.log_dict({f"{stage}/{key}": float(value) for key, value in results.items()}, sync_dist=False, rank_zero_only=False)

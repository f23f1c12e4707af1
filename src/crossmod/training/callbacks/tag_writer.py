"""Write the tag generator's tags: `<dirpath>/<split>.jsonl` ({"id", "tags"} per meme), per-meme scores, a report.

`test` is the run's test stage (the memes `trainer.test` scores); any other name in `splits` is a shard
split of the dataset (e.g. `train`, whose generated tags the few-shot exemplar retrieval can use), generated
after the test stage with the same weights. Beside each `<split>.jsonl`: `<split>.similarity.csv` (id,
gold and generated tag counts, the meme's tag similarity, empty when it has no gold tags), and for the
whole run `report.json` / `report.md` (per split: memes, scored, no gold tags, empty generations, mean
similarity). Each rank writes its own part; rank 0 merges the parts after a barrier.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import move_data_to_device
from torch.utils.data import DataLoader

from crossmod.data.batches import SamplesToBatch
from crossmod.data.shards import read_samples
from crossmod.evaluation.tag_similarity import TagSimilaritySummary, markdown, summarise

TEST_STAGE = "test"


class TagWriter(L.Callback):
    def __init__(self, dirpath: str, splits: list[str] | tuple[str, ...] = (TEST_STAGE,), batch_size: int = 8) -> None:
        self.dirpath, self.splits, self.batch_size = Path(dirpath), list(splits), int(batch_size)
        self.summaries: dict[str, TagSimilaritySummary] = {}

    def on_test_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        module.generated_tags.clear()

    def on_test_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.TESTING and TEST_STAGE in self.splits:
            self._write(trainer, TEST_STAGE, module.generated_tags)
        module.generated_tags.clear()

    def on_test_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.state.fn != TrainerFn.TESTING:
            return
        for split in self.splits:
            if split != TEST_STAGE:
                self._write(trainer, split, self._generate(trainer, module, split))
        if trainer.is_global_zero and self.summaries:
            generator, embedder = str(module.hparams.get("name_or_path")), module.embedder.name_or_path
            report = {
                "generator": generator,
                "embedder": embedder,
                "max_new_tokens": module.max_new_tokens,
                "splits": {split: s.as_dict() for split, s in self.summaries.items()},
            }
            (self.dirpath / "report.json").write_text(json.dumps(report, indent=1))
            table = markdown(self.summaries, generator, embedder)
            (self.dirpath / "report.md").write_text(table + "\n")
            print(table, flush=True)

    def _generate(self, trainer: L.Trainer, module: L.LightningModule, split: str) -> list[dict[str, Any]]:
        """Tags for this rank's share of a shard split; every rank runs the same number of batches (sharded
        models generate collectively), a short share topped up with a meme whose rows are then dropped."""
        records = read_samples(trainer.datamodule.dataset_dir, [split])
        share = -(-len(records) // trainer.world_size)
        mine = records[trainer.global_rank :: trainer.world_size]
        real = len(mine)
        mine += records[:1] * (share - real)
        loader = DataLoader(mine, batch_size=self.batch_size, collate_fn=SamplesToBatch(module.preprocessor))
        was_training = module.training
        module.eval()
        rows: list[dict[str, Any]] = []
        with torch.inference_mode():
            for batch in loader:
                rows += module.generate_tags(move_data_to_device(batch, module.device))
        module.train(was_training)
        return rows[:real]

    def _write(self, trainer: L.Trainer, split: str, rows: list[dict[str, Any]]) -> None:
        self.dirpath.mkdir(parents=True, exist_ok=True)
        part = self.dirpath / f"{split}.rank{trainer.global_rank}.json"
        part.write_text(json.dumps(rows))
        trainer.strategy.barrier("tags")
        if trainer.is_global_zero:
            parts = sorted(self.dirpath.glob(f"{split}.rank*.json"))
            merged = [row for path in parts for row in json.loads(path.read_text())]
            with open(self.dirpath / f"{split}.jsonl", "w") as handle:
                for row in merged:
                    handle.write(json.dumps({"id": row["id"], "tags": row["tags"]}) + "\n")
            with open(self.dirpath / f"{split}.similarity.csv", "w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(("id", "gold_tags", "generated_tags", "similarity"))
                for row in merged:
                    score = "" if row["similarity"] is None else f"{row['similarity']:.6f}"
                    writer.writerow((row["id"], row["gold_tags"], len(row["tags"]), score))
            for path in parts:
                path.unlink()
            self.summaries[split] = summarise([row["similarity"] for row in merged], [len(row["tags"]) for row in merged])
        trainer.strategy.barrier("tags-merged")

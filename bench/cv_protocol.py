"""The per-culture cross-validation protocol (Multi3Hate's FT-<culture> models) run twice: by crossmod as `train.py` runs
each fold, and by transformers.Trainer + PEFT as a user would write it, over the same memes, folds and batches.

Used by bench/vision_cache.py. The memes are the study's released layout (the Multi3Hate study, docs/datasets.md: `memes/{lang}/{Template}/
{id}.jpg` at 512 px with the caption drawn on, `captions/{lang}.csv`, `final_annotations.csv`), rendered like
bench/rendered_memes.py's, with random culture labels. Both variants train one model per culture and fold from the same
weights (LoRA on q and v, r 8, α 16, one logit on the last token, AdamW lr 2e-4 constant, no clipping) and score the
held-out fold once with the final weights (`cv.selection=last`, the study's rule).

- crossmod: `crossmod.training.pipeline.run` (what `train.py` calls) on the config `train.py experiment=qwen_lora_cv fold=k
  ~data.heads.<others>` composes, in this process, starting from an empty data folder: the conversion to shards, the
  folds, the vision cache (written in the first run, read by every later one), checkpoints and run files included.
- transformers.Trainer: per culture and fold, `from_pretrained` + `get_peft_model` + a linear head, `Trainer.train` over a
  map-style dataset reading the layout's JPEG files, `Trainer.predict` over the held-out fold. It is handed crossmod's
  training batches (one dataset item per batch, both epochs in order), held-out memes and initial trainable weights,
  so the two do the same tensor work and their held-out predictions can be compared meme by meme.
LoRA dropout is 0 here (the recipe's 0.05 draws masks from each loop's own random stream, which would make the
predictions differ for that reason alone).
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
from common import compose
from hf_baseline import LastTokenClassifier, training_arguments
from rendered_memes import CAPTIONS, LANGS, render

CULTURES = ("US", "DE", "MX", "IN", "CN")
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0}
LR = 2e-4
RECORDS: dict[str, dict[str, Any]] = {}  # run directory -> what RecordBatches saw in it


def write_layout(root: Path, memes: int, seed: int = 0) -> Path:
    """The released Multi3Hate layout with `memes` memes in five languages and random labels."""
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = [100 + k for k in range(memes)]
    labels = {i: [int(v) for v in rng.integers(0, 2, size=len(CULTURES))] for i in ids}
    with open(root / "final_annotations.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Meme ID", "US", "DE", "MX", "CN", "IN"])
        for i in ids:
            by_culture = dict(zip(CULTURES, labels[i]))
            writer.writerow([i, *(by_culture[c] for c in ("US", "DE", "MX", "CN", "IN"))])
    for lang in LANGS:
        rows = []
        for k, i in enumerate(ids):
            template = f"Template{k % 3}"
            caption = k % len(CAPTIONS[lang])
            image, _ = render(lang, caption, seed=seed * 100_000 + i)
            folder = root / "memes" / lang / template
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i}.jpg").write_bytes(image)
            english = CAPTIONS["en"][k % len(CAPTIONS["en"])].replace(" | ", " <sep> ")
            rows.append([i, template, english, CAPTIONS[lang][caption].replace(" | ", " <sep> ")])
        (root / "captions").mkdir(exist_ok=True)
        with open(root / "captions" / f"{lang}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["Meme ID", "Template Name", "Original (English)", "Translation"])
            writer.writerows(rows)
    return root


# ---------------------------------------------------------------------------------------------- crossmod
class RecordBatches(L.Callback):
    """Given to the runs through `+callbacks.bench_record`: the run's initial trainable weights and the meme ids of
    every training batch, under the run's directory in `RECORDS`."""

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        initial = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
        RECORDS[trainer.default_root_dir] = {"initial": initial, "batches": []}

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: dict[str, Any], batch_idx: int) -> None:
        RECORDS[trainer.default_root_dir]["batches"].append(list(batch["ids"]))


def crossmod_overrides(layout: Path, model: Path, work: Path, culture: str, fold: int, epochs: int, folds: int) -> list[str]:
    run = work / "runs" / f"FT-{culture}" / f"fold{fold}"
    return [
        "experiment=qwen_lora_cv",
        f"data.raw_dir={layout}",
        f"model.name_or_path={model}",
        f"paths.data_dir={work / 'data'}",
        f"paths.output_dir={run}",
        f"fold={fold}",
        f"num_folds={folds}",
        f"trainer.max_epochs={epochs}",
        f"model.fusion.lora.lora_dropout={LORA['lora_dropout']}",
        *[f"~data.heads.{other}" for other in CULTURES if other != culture],
        f"name=qwen_lora_cv-FT-{culture}",
        "print_table=false",
        "+callbacks.bench_record._target_=cv_protocol.RecordBatches",
    ]


def crossmod_protocol(layout: Path, model: Path, work: Path, cultures: list[str], epochs: int, folds: int) -> dict[str, Any]:
    """Every culture's fold runs from an empty data folder; wall time, held-out P(hate) per (culture, meme), and each
    run's record (directory → initial weights and batches)."""
    from omegaconf import OmegaConf

    from crossmod.training.pipeline import run

    shutil.rmtree(work, ignore_errors=True)
    predictions: dict[str, dict[str, float]] = {}
    runs: dict[tuple[str, int], str] = {}
    start = time.perf_counter()
    for culture in cultures:
        for fold in range(folds):
            cfg = compose(crossmod_overrides(layout, model, work, culture, fold, epochs, folds))
            OmegaConf.resolve(cfg)
            run(cfg)
            runs[culture, fold] = cfg.paths.output_dir
    seconds = time.perf_counter() - start
    for (culture, _fold), directory in runs.items():
        with open(Path(directory) / "predictions" / "test.csv") as handle:
            for row in csv.DictReader(handle):
                predictions.setdefault(culture, {})[row["id"]] = float(row["probability"])
    return {"seconds": seconds, "predictions": predictions, "runs": {k: RECORDS[v] | {"held_out": held_out(v)} for k, v in runs.items()}}


def held_out(run_dir: str) -> list[str]:
    """The held-out fold's meme ids in the order crossmod scored them."""
    with open(Path(run_dir) / "predictions" / "test.csv") as handle:
        return [row["id"] for row in csv.DictReader(handle)]


# ---------------------------------------------------------------------------------------------- transformers
def hf_protocol(
    layout: Path, model: Path, crossmod_runs: dict[tuple[str, int], dict[str, Any]], batch_size: int, workers: int
) -> dict[str, Any]:
    """The same runs with transformers.Trainer + PEFT; wall time and held-out P(hate) per (culture, meme)."""
    predictions: dict[str, dict[str, float]] = {}
    start = time.perf_counter()
    for (culture, _fold), record in crossmod_runs.items():
        predictions.setdefault(culture, {}).update(hf_run(layout, model, culture, record, batch_size, workers))
    return {"seconds": time.perf_counter() - start, "predictions": predictions}


def read_layout(layout: Path) -> dict[str, dict[str, Any]]:
    """Meme id (crossmod's `multi3hate/<id>/<lang>`) → image file, language and labels, from the layout's CSV files."""
    with open(layout / "final_annotations.csv") as handle:
        labels = {row["Meme ID"]: {c: int(row[c]) for c in CULTURES} for row in csv.DictReader(handle)}
    memes = {}
    for lang in LANGS:
        with open(layout / "captions" / f"{lang}.csv") as handle:
            for row in csv.DictReader(handle):
                image = layout / "memes" / lang / row["Template Name"] / f"{row['Meme ID']}.jpg"
                memes[f"multi3hate/{row['Meme ID']}/{lang}"] = {"image": image, "lang": lang, "labels": labels[row["Meme ID"]]}
    return memes


def hf_run(layout: Path, model: Path, culture: str, record: dict[str, Any], batch_size: int, workers: int) -> dict[str, float]:
    import torch
    from PIL import Image
    from transformers import AutoProcessor, Trainer

    from crossmod.models.vlm.prompts import PromptSpec

    memes = read_layout(layout)
    processor = AutoProcessor.from_pretrained(model, trust_remote_code=False)
    processor.tokenizer.padding_side = "left"
    prompt = PromptSpec(**prompt_config())

    def load(meme_id: str) -> dict[str, Any]:
        meme = memes[meme_id]
        with Image.open(meme["image"]) as image:
            image = image.convert("RGB")
        chat = processor.apply_chat_template(prompt.message("", meme["lang"]), add_generation_prompt=True, tokenize=False)
        return {"chat": chat, "image": image, "label": float(meme["labels"][culture]), "id": meme_id}

    class Batches(torch.utils.data.Dataset):
        """One item per training batch (crossmod's, both epochs in order)."""

        def __init__(self, batches: list[list[str]]) -> None:
            self.batches = batches

        def __len__(self) -> int:
            return len(self.batches)

        def __getitem__(self, index: int) -> list[dict[str, Any]]:
            return [load(meme_id) for meme_id in self.batches[index]]

    class Memes(torch.utils.data.Dataset):
        def __init__(self, ids: list[str]) -> None:
            self.ids = ids

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, index: int) -> dict[str, Any]:
            return load(self.ids[index])

    def collate(features: list[Any]) -> dict[str, Any]:
        memes = features[0] if isinstance(features[0], list) else features  # a training item is a whole batch
        batch = processor(
            text=[m["chat"] for m in memes],
            images=[[m["image"]] for m in memes],
            padding=True,
            add_special_tokens=False,
            return_tensors="pt",
        )
        return {**batch, "labels": torch.tensor([m["label"] for m in memes])}

    classifier = LastTokenClassifier(model, 1, LORA)
    start_from(classifier, record["initial"])
    with tempfile.TemporaryDirectory() as out:
        arguments = training_arguments(
            out,
            LR,
            per_device_train_batch_size=1,  # one item = one of crossmod's batches
            per_device_eval_batch_size=batch_size,
            num_train_epochs=1,  # the items hold every epoch's batches in order
            max_grad_norm=0.0,  # crossmod's trainer does not clip
            dataloader_num_workers=workers,
        )
        trainer = Trainer(model=classifier, args=arguments, train_dataset=Batches(record["batches"]), data_collator=collate)
        trainer.train()
        logits = trainer.predict(Memes(record["held_out"])).predictions
    probabilities = torch.sigmoid(torch.as_tensor(logits)).tolist()
    return dict(zip(record["held_out"], probabilities))


def start_from(classifier, initial: dict[str, Any]) -> None:
    """crossmod's initial LoRA and head weights into the transformers.Trainer variant's model (same shapes, names
    matched after PEFT's `base_model.model.` prefix; the head is crossmod's only trainable non-LoRA layer)."""
    import torch

    own = dict(classifier.named_parameters())
    lora = {name.split("base_model.model.", 1)[1]: value for name, value in initial.items() if "lora_" in name}
    head = [value for name, value in initial.items() if "lora_" not in name]
    with torch.no_grad():
        for name, parameter in own.items():
            if "lora_" in name:
                parameter.copy_(lora.pop(name.split("base_model.model.", 1)[1]))
        weight, bias = sorted(head, key=lambda t: -t.dim())
        classifier.head.weight.copy_(weight)
        classifier.head.bias.copy_(bias)
    if lora:
        raise RuntimeError(f"crossmod LoRA weights without a counterpart: {sorted(lora)[:3]}")


def prompt_config() -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose(["experiment=qwen_lora_cv"]).model.prompt, resolve=True)


def largest_difference(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> float:
    """Largest |P(hate)| difference over every culture's held-out memes (both must hold the same memes)."""
    if {c: sorted(v) for c, v in a.items()} != {c: sorted(v) for c, v in b.items()}:
        raise RuntimeError("the two protocols scored different memes")
    return max(abs(a[c][m] - b[c][m]) for c in a for m in a[c])


if __name__ == "__main__":  # layout only, for a look: python bench/cv_protocol.py <folder> [memes]
    import sys

    print(json.dumps(str(write_layout(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 6))))

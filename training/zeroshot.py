"""Zero-shot evaluation of a VLM with the study's prompts, run by `python zeroshot.py experiment=qwen_zeroshot …`.

For every prompt (3 questions × 2 option orders by default) every meme is answered by batched greedy
generation (max 40 new tokens); the answer is parsed (letters, the label words, native letters; anything
else is invalid and counts as wrong) and the first generated step's logits of the two option letters give
P(hate), so AUROC is defined too. Results land in `<run dir>/zeroshot/`: `answers.csv` (one row per meme
and prompt), `summary.json` and `summary.md` (accuracy per meme language × culture, mean ± sample std over
the prompts, Wilcoxon rank-sum markers, invalid counts; AUROC per prompt and culture).
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from datamodules.batches import SamplesToBatch
from datamodules.shards import read_samples
from evaluation.zeroshot_stats import accuracy_table, auroc_table, markdown, summarise
from models.vlm.families import model_type
from training.console import configure_console
from training.inference_device import inference_device


def answer_all(
    model: Any, records: list[dict[str, Any]], prompt_index: int, batch_size: int, max_new_tokens: int, device: torch.device
) -> list[dict[str, Any]]:
    """Answers of one prompt for every meme: generation, parsed prediction, P(hate) from the first step."""
    preprocessor = model.preprocessor
    preprocessor.prompt = replace(preprocessor.prompt, index=prompt_index)
    preprocessor._option_ids.clear()
    base = model.backbone._base()
    tokenizer = preprocessor.processor.tokenizer
    loader = DataLoader(records, batch_size=batch_size, collate_fn=SamplesToBatch(preprocessor))
    rows = []
    for batch in loader:
        inputs = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor) and k not in ("option_ids",)}
        with torch.no_grad():
            out = base.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
            )
        first = out.scores[0].float().log_softmax(-1).cpu()
        options = first.gather(1, batch["option_ids"])
        p_hate = torch.softmax(options, dim=1)[:, 0]
        texts = tokenizer.batch_decode(out.sequences[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        for i, sample_id in enumerate(batch["ids"]):
            rows.append({"id": sample_id, "prompt": prompt_index, "generation": texts[i], "p_hate": float(p_hate[i])})
    by_id = {r["id"]: r for r in records}
    for row in rows:
        record = by_id[row["id"]]
        options = preprocessor.prompt.options(record["lang"])  # letters, hate letter and label words of this prompt
        row.update(lang=record["lang"], prediction=options.parse(row["generation"]), labels=record["labels"])
    return rows


def run(cfg: DictConfig) -> float:
    """Answer every meme of `zeroshot.splits` for every prompt and write `<paths.output_dir>/zeroshot/`.

    Returns the share of invalid answers (what `zeroshot.py` hands to a sweeper).
    """
    configure_console()
    out = Path(cfg.paths.output_dir) / "zeroshot"
    out.mkdir(parents=True, exist_ok=True)
    settings = cfg.zeroshot
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, _recursive_=False)
    model.configure_model()
    device = inference_device(cfg.trainer, "zeroshot.py")
    model.to(device).eval()
    datamodule.prepare_data()
    records = read_samples(datamodule.dataset_dir, list(settings.splits))
    if not records:
        raise ValueError(f"no memes in splits {list(settings.splits)} of {datamodule.dataset_dir}")
    rows = []
    for index in settings.prompts:
        rows += answer_all(model, records, index, settings.batch_size, settings.max_new_tokens, device)
        print(f"[zeroshot] prompt {index}: {len(records)} memes answered", flush=True)
    with open(out / "answers.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("id", "lang", "prompt", "prediction", "p_hate", "generation"))
        writer.writerows(
            (r["id"], r["lang"], r["prompt"], "" if r["prediction"] is None else r["prediction"], f"{r['p_hate']:.6f}", r["generation"])
            for r in rows
        )
    summary = summarise(accuracy_table(rows))
    cultures = list(cfg.data.heads)
    result = {
        "model": cfg.model.name_or_path,
        "family": model.backbone.family.name,
        "model_type": model_type(str(cfg.model.name_or_path)),
        "prompts": list(settings.prompts),
        "memes": len(records),
        "answers": summary.answers,
        "invalid": summary.invalid,
        "accuracy": {
            lang: {c: {"mean": cell.mean, "std": cell.std, "per_prompt": list(map(float, cell.accuracies))} for c, cell in s.cells.items()}
            | {"best": s.best, "marker": s.marker}
            for lang, s in summary.languages.items()
        },
        "auroc": auroc_table(rows, cultures),
    }
    (out / "summary.json").write_text(json.dumps(result, indent=1, default=float))
    (out / "summary.md").write_text(markdown(summary) + "\n")
    print(markdown(summary))
    print(f"[zeroshot] {summary.invalid} of {summary.answers} answers invalid (counted wrong); files in {out}")
    return summary.invalid / max(summary.answers, 1)

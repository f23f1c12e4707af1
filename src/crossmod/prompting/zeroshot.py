"""Zero-shot evaluation of a VLM with the study's prompts, run by `crossmod zeroshot experiment=qwen_zeroshot …`.

For every prompt (3 questions × 2 option orders by default) every meme is answered by batched greedy
generation (max 40 new tokens); the answer is parsed (letters, the label words, native letters; anything
else is invalid and counts as wrong) and the first generated step's logits of the two option letters give
P(hate), so AUROC is defined too. Results land in `<run dir>/zeroshot/`: `answers.csv` (one row per meme
and prompt; `tokens` = max_new_tokens marks an answer that may have been cut off), `summary.json` and `summary.md`
(accuracy per meme language × culture, mean ± sample std over the prompts, markers from the exact one-sided
Wilcoxon rank-sum test over the prompts, with the test named and a note when too few prompts allow no marker,
invalid counts; AUROC per prompt and culture). Under DeepSpeed ZeRO-3 (`strategy=deepspeed_zero3`) the model is built
straight into partitions across the ranks and the ranks generate in lockstep: a model larger than one device is a
config, not a code change.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig

from crossmod.data.shards import read_samples
from crossmod.evaluation.zeroshot_stats import accuracy_table, auroc_table, markdown, summarise
from crossmod.inference.scoring import predict_in_order, scoring_trainer
from crossmod.models.vlm.families import model_type
from crossmod.prompting.chat_answers import GreedyAnswers
from crossmod.runtime.console import configure_console


def answer_all(
    trainer: L.Trainer,
    model: Any,
    records: list[dict[str, Any]],
    prompt_index: int,
    batch_size: int,
    max_new_tokens: int,
    num_workers: int = 0,
) -> list[dict[str, Any]]:
    """Answers of one prompt for every meme (Lightning's predict loop on the trainer's devices, every meme once):
    generation, parsed prediction, P(hate) from the first step."""
    preprocessor = model.preprocessor
    if preprocessor.asked_heads:
        raise ValueError(
            "model.prompt.country=head asks each meme once per label head (a verbalizer's training setting); zero-shot "
            "answers each meme once per prompt: use model.prompt.country=language or a country name"
        )
    preprocessor.ask_with(prompt_index)
    tokenizer = preprocessor.processor.tokenizer
    module = GreedyAnswers(
        model,
        lambda built: built.backbone.base_model(),
        tokenizer,
        max_new_tokens,
        vision_cache=lambda built: built.backbone.vision_cache,
    )
    answers = predict_in_order(trainer, module, records, batch_size, preprocessor, num_workers)
    rows = []
    for record, answer in zip(records, answers):
        options = preprocessor.prompt.options(record["lang"])  # letters, hate letter and label words of this prompt
        rows.append(
            {
                "id": record["id"],
                "prompt": prompt_index,
                "generation": answer["generation"],
                "p_hate": answer["p_hate"][0],
                "tokens": answer["tokens"][0],
                "lang": record["lang"],
                "prediction": options.parse(answer["generation"]),
                "labels": record["labels"],
            }
        )
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
    model = instantiate(cfg.model, _recursive_=False)  # built by Lightning inside the strategy's init context (GreedyAnswers)
    trainer = scoring_trainer(cfg.trainer)  # the trainer= group: device, precision, processes (every meme once)
    datamodule.prepare_data()
    records = read_samples(datamodule.dataset_dir, list(settings.splits))
    if not records:
        raise ValueError(f"no memes in splits {list(settings.splits)} of {datamodule.dataset_dir}")
    rows = []
    for index in settings.prompts:
        rows += answer_all(trainer, model, records, index, settings.batch_size, settings.max_new_tokens, settings.get("num_workers", 0))
        if trainer.is_global_zero:
            print(f"[zeroshot] prompt {index}: {len(records)} memes answered", flush=True)
    if not trainer.is_global_zero:
        return float("nan")  # rank 0 writes the files and returns the invalid share
    with open(out / "answers.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("id", "lang", "prompt", "prediction", "p_hate", "tokens", "generation"))
        writer.writerows(
            (
                r["id"],
                r["lang"],
                r["prompt"],
                "" if r["prediction"] is None else r["prediction"],
                f"{r['p_hate']:.6f}",
                r["tokens"],
                r["generation"],
            )
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
        "markers": {  # how `accuracy[lang].marker` was decided
            "test": summary.test,
            "alternative": summary.alternative,
            "alpha": summary.alpha,
            "note": summary.note,
            "p": {lang: {"vs_lowest": s.p_vs_lowest, "vs_second": s.p_vs_second} for lang, s in summary.languages.items()},
        },
        "auroc": auroc_table(rows, cultures),
    }
    (out / "summary.json").write_text(json.dumps(result, indent=1, default=float))
    (out / "summary.md").write_text(markdown(summary) + "\n")
    print(markdown(summary))
    print(f"[zeroshot] {summary.invalid} of {summary.answers} answers invalid (counted wrong); files in {out}")
    return summary.invalid / max(summary.answers, 1)

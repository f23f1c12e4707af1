"""MemeBridge prompting protocol: `crossmod memebridge experiment=memebridge_prompting condition=def|us_rp|cn_rp`.

Every meme of `memebridge.splits` is asked four questions (MCQ, sentiment, emotions, explanation) under
one condition (default, U.S. role-play, Chinese role-play: `crossmod.prompting.memebridge_prompts`) by batched greedy
generation with any image-text-to-text VLM (`model.name_or_path`, a hub id or a checkpoint folder, plus
`memebridge.adapter`: a LoRA folder exported by crossmod). Answers are parsed and scored by
`crossmod.evaluation.memebridge`; the explanations are embedded here with a sentence-transformers model
(`memebridge.embedding_model`) and their vectors handed over. Results land in `<run dir>/memebridge/`:
`answers.csv` (one row per meme and task, with the rendered prompt), `summary.json` (every PS term, the
condition, the model, invalid counts) and `summary.md` (the table the console prints).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (registers ${run_id:}, ${tiny_vlm:} …)
from crossmod.data.shards import read_samples
from crossmod.data.sources.memebridge import EMOTIONS, SENTIMENTS
from crossmod.evaluation.memebridge import (
    MCQ_LETTERS,
    TASKS,
    markdown,
    parse_mcq,
    parse_sentiment,
    row_cosines,
    score_choices,
    score_emotions,
    similarity,
    summarise,
)
from crossmod.inference.scoring import scoring_trainer
from crossmod.models.sentence_embedder import SentenceEmbedder
from crossmod.models.vlm.families import model_type
from crossmod.models.vlm.preprocess import render_chat
from crossmod.prompting.chat_answers import ChatBatches, GreedyAnswers, answer_chats
from crossmod.prompting.memebridge_prompts import MemeBridgePrompts
from crossmod.runtime.console import configure_console


def questions(records: list[dict[str, Any]], prompts: MemeBridgePrompts) -> list[dict[str, Any]]:
    """One entry per meme and task it is annotated for: the chat messages, the gold answer, the MCQ order."""
    asked = []
    for record in records:
        meta, labels = record.get("meta") or {}, record.get("labels") or {}
        explained = any(meta.get(key) for key in ("explanation", "explanation_formatted"))
        golds = {
            "mcq": None if not meta.get("mcq") else MCQ_LETTERS[prompts.option_order(record["id"]).index("correct")],
            "sentiment": None if labels.get("sentiment") is None else SENTIMENTS[labels["sentiment"]],
            "emotion": None if labels.get("emotion") is None else sorted(e for e, on in zip(EMOTIONS, labels["emotion"]) if on),
            "explanation": "" if explained else None,
        }
        for task in TASKS:
            if golds[task] is None:
                continue
            options = " ".join(f"{a}={n}" for a, n in zip(MCQ_LETTERS, prompts.option_order(record["id"]))) if task == "mcq" else ""
            asked.append(
                {"id": record["id"], "task": task, "gold": golds[task], "options": options, "messages": prompts.message(task, record)}
            )
    return asked


def answer_all(trainer: L.Trainer, model: Any, records: list[dict[str, Any]], asked: list[dict[str, Any]], settings: DictConfig) -> None:
    """Fill in `generation` for every question, task by task (each with its own `max_new_tokens`), through Lightning's
    predict loop on the `trainer=` group's devices (src/crossmod/prompting/chat_answers.py): every question answered once."""
    preprocessor = model.preprocessor
    by_id = {record["id"]: record for record in records}
    batches = ChatBatches(preprocessor.processor, preprocessor.image_size, images_required=False)  # as in training
    for task in TASKS:
        entries = [entry for entry in asked if entry["task"] == task]
        if not entries:
            continue
        chats = [render_chat(preprocessor.processor, preprocessor.source, e["messages"]) for e in entries]
        placeholder = preprocessor.family.image_placeholder
        if placeholder not in chats[0]:
            raise ValueError(
                f"the chat template of {preprocessor.source!r} ({preprocessor.family.name}) wrote no image placeholder {placeholder!r}: "
                f"the image would not reach the model. Rendered: {chats[0][:300]!r}"
            )
        module = GreedyAnswers(
            model,
            lambda built: built.backbone.base_model(),
            preprocessor.processor.tokenizer,
            settings.max_new_tokens[task],
            vision_cache=lambda built: built.backbone.vision_cache,
        )
        items = [{"chat": chat, "memes": [by_id[entry["id"]]]} for entry, chat in zip(entries, chats)]
        answers = answer_chats(trainer, module, items, batches, settings.batch_size, settings.get("num_workers", 0))
        for entry, chat, answer in zip(entries, chats, answers):
            entry.update(chat=chat, generation=answer["generation"])
        say(f"[memebridge] {task}: {len(entries)} memes answered")


@rank_zero_only
def say(line: str) -> None:
    """A progress line, printed once however many processes answer."""
    print(line, flush=True)


def embed(model_name: str, texts: list[str], batch_size: int, device: torch.device) -> np.ndarray:
    """Sentence embeddings (not normalised: the cosine is taken in crossmod.evaluation.memebridge)."""
    return SentenceEmbedder(str(model_name), batch_size, device=str(device)).encode(texts)


REFERENCES = {"sim_orig": "explanation", "sim_fmt": "explanation_formatted"}  # similarity → the meta field it compares with


def explanation_similarities(
    asked: list[dict[str, Any]], records: list[dict[str, Any]], settings: DictConfig, device: torch.device
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sim_orig and Sim_fmt over the memes that have each reference; each row's cosine is written back to it."""
    metas = {record["id"]: record.get("meta") or {} for record in records}
    written = [entry for entry in asked if entry["task"] == "explanation"]
    if not written:
        return similarity(np.empty((0, 1)), np.empty((0, 1))), similarity(np.empty((0, 1)), np.empty((0, 1)))
    texts = [entry["generation"] for entry in written]
    texts += [metas[entry["id"]].get(key) or "" for key in REFERENCES.values() for entry in written]
    generated, *references = embed(settings.embedding_model, texts, settings.embedding_batch_size, device).reshape(3, len(written), -1)
    results = []
    for (column, key), reference in zip(REFERENCES.items(), references):
        has = np.array([bool(metas[entry["id"]].get(key)) for entry in written])
        results.append(similarity(generated[has], reference[has]))
        for entry, cosine in zip((e for e, h in zip(written, has) if h), row_cosines(generated[has], reference[has])):
            entry[column] = float(cosine)
    return results[0], results[1]


def load_adapter(model: Any, folder: str) -> None:
    """A LoRA folder (an adapter folder: a run's `adapter/`, an export's culture, or PEFT's own files) onto the base
    model, under the checks every adapter folder gets (src/crossmod/artifacts/adapter_folder.py): verified before it is
    read, and its weights exactly the ones the base takes, never half-loaded beside the base's own."""
    from crossmod.artifacts import adapter_folder

    named = getattr(getattr(model, "hparams", None), "name_or_path", None)  # MemeClassifier's family-level setting
    fix = "give memebridge.adapter a LoRA folder crossmod wrote (a run's adapter/ or crossmod export's culture folder)"
    adapter_folder.verify(Path(folder), fix)
    adapter_folder.load_peft(model, Path(folder), {"base_model": named or "the configured model"}, fix)


COLUMNS = ("id", "task", "condition", "options", "gold", "prediction", "correct", "sim_orig", "sim_fmt", "generation", "prompt")


def write_answers(path: Path, asked: list[dict[str, Any]], condition: str) -> None:
    """One row per meme and task; an emotion set is a JSON list, an invalid answer an empty prediction."""

    def cell(value: Any) -> str:
        if value is None:
            return ""
        return json.dumps(sorted(value)) if isinstance(value, list | frozenset | set) else str(value)

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for entry in asked:
            writer.writerow(
                {
                    "id": entry["id"],
                    "task": entry["task"],
                    "condition": condition,
                    "options": entry["options"],
                    "gold": cell(entry["gold"]),
                    "prediction": cell(entry.get("prediction")),
                    "correct": "" if entry["task"] == "explanation" else int(entry["correct"]),
                    **{column: f"{entry[column]:.6f}" for column in ("sim_orig", "sim_fmt") if column in entry},
                    "generation": entry["generation"],
                    "prompt": entry["chat"],
                }
            )


def score(asked: list[dict[str, Any]]) -> dict[str, Any]:
    """Each choice task's TaskScore; the parsed answer and its correctness are written back to every row."""
    scores = {}
    for task in ("mcq", "sentiment", "emotion"):
        rows = [entry for entry in asked if entry["task"] == task]
        generations = [entry["generation"] for entry in rows]
        if task == "emotion":
            gold = np.array([[e in entry["gold"] for e in EMOTIONS] for entry in rows], dtype=bool).reshape(len(rows), len(EMOTIONS))
            result = score_emotions(gold, generations)
        else:
            result = score_choices([entry["gold"] for entry in rows], generations, parse_mcq if task == "mcq" else parse_sentiment)
        for entry, prediction, correct in zip(rows, result.predictions, result.correct):
            entry.update(prediction=sorted(prediction) if isinstance(prediction, frozenset) else prediction, correct=bool(correct))
        scores[task] = result
    return scores


def run(cfg: DictConfig) -> float:
    """Ask, parse, score and write `<paths.output_dir>/memebridge/`; returns PS (NaN when a term is missing)."""
    configure_console()
    out = Path(cfg.paths.output_dir) / "memebridge"
    out.mkdir(parents=True, exist_ok=True)
    settings = cfg.memebridge
    condition = str(cfg.condition)
    prompts = MemeBridgePrompts.from_config(OmegaConf.to_container(settings.prompts, resolve=True), condition)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    records = read_samples(datamodule.dataset_dir, list(settings.splits))
    if not records:
        raise ValueError(f"no memes in splits {list(settings.splits)} of {datamodule.dataset_dir}")
    trainer = scoring_trainer(cfg.trainer)  # the trainer= group: device, precision, processes, ZeRO-3 (every question once)
    device = trainer.strategy.root_device  # this process's device: the sentence embedder of the similarity scores
    model = instantiate(cfg.model, _recursive_=False)  # without an adapter, built by Lightning (ZeRO-3: in partitions)
    if settings.adapter:
        model.configure_model()
        load_adapter(model, str(settings.adapter))
    asked = questions(records, prompts)
    answer_all(trainer, model, records, asked, settings)
    scores = score(asked)
    sim_orig, sim_fmt = explanation_similarities(asked, records, settings, device)
    written = [entry for entry in asked if entry["task"] == "explanation"]
    explanation = {"items": len(written), "invalid": sum(not entry["generation"].strip() for entry in written)}
    summary = {
        "condition": condition,
        "role": prompts.role,
        "role_placement": prompts.role_placement,
        "model": str(cfg.model.name_or_path),
        "adapter": None if not settings.adapter else str(settings.adapter),
        "family": model.backbone.family.name,
        "model_type": model_type(str(cfg.model.name_or_path)),
        "embedding_model": str(settings.embedding_model),
        "splits": list(settings.splits),
        "memes": len(records),
        "input": prompts.input,
        "mcq_order": prompts.mcq_order if isinstance(prompts.mcq_order, str) else list(prompts.mcq_order),
        "order_seed": prompts.order_seed,
        "max_new_tokens": dict(settings.max_new_tokens),
        **summarise(scores, explanation, sim_orig, sim_fmt),
    }
    summary["invalid"] = sum(task["invalid"] for task in summary["tasks"].values())
    summary["answers"] = len(asked)
    if not trainer.is_global_zero:  # every rank holds every answer; rank 0 writes them and returns PS
        return float("nan")
    write_answers(out / "answers.csv", asked, condition)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False))
    table = markdown(summary)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    print(
        f"[memebridge] {summary['invalid']} of {len(asked)} answers invalid (counted wrong; empty explanations scored as such); files in {out}"
    )
    value = summary["ps"]["value"]
    return float("nan") if value is None else float(value)

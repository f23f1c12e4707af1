"""ToxicTags few-shot VLM prompting with retrieved exemplars (the ToxicTags study, docs/datasets.md), the study's method:

    crossmod fewshot experiment=toxictags_fewshot data.raw_dir=… selection=image_tags shots=4 stage=2

For every stage (I: toxic/normal; II: hateful/dangerous/offensive/normal, undecided memes left out), every
shot count and every strategy (`selection=all` runs them side by side), each test meme is asked once with
k exemplars retrieved from train (src/crossmod/prompting/exemplar_pool.py), by batched greedy generation; answers
are read as classes (src/crossmod/evaluation/fewshot_scores.py) and scored by macro F1. α of the image ⊕ tag
strategies is searched on a held-out part of train with exemplars from the rest of train, never on the
queried memes. CLIP embeddings are computed once per dataset and model and cached beside the shards.
Results land in `<run dir>/fewshot/`: `answers.csv` (every answer, the α search's too), `summary.json`,
`summary.md`.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, ListConfig, OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (registers ${tiny_vlm:} …)
from crossmod.data.shards import read_manifest, read_samples
from crossmod.evaluation.fewshot_scores import STAGE_CLASSES, STAGE_HEADS, STAGE_NAMES, parse_stage_answer, results_markdown, stage_scores
from crossmod.inference.scoring import scoring_trainer
from crossmod.models.vlm.families import model_type
from crossmod.prompting.clip_embeddings import ClipEncoder, cache_file, cached_embeddings, model_identity
from crossmod.prompting.exemplar_pool import (
    STRATEGIES,
    MemeTable,
    index_tags,
    needs_alpha,
    read_tags_file,
    strategies_asked,
    tag_vocabulary,
)
from crossmod.prompting.exemplars import heldout_split, search_alpha
from crossmod.prompting.fewshot_prompts import FewShotGenerator, FewShotPrompt, stage_label
from crossmod.runtime.console import configure_console

if TYPE_CHECKING:
    import torch

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ANSWER_COLUMNS = ("phase", "strategy", "stage", "shots", "alpha", "id", "exemplars", "gold", "prediction", "generation")


@rank_zero_only
def say(line: str) -> None:
    """A progress line, printed once however many processes answer."""
    print(line, flush=True)


def int_list(value: Any, name: str, allowed: Sequence[int] | None = None) -> list[int]:
    """`2`, `[2, 4]` or `"2,4"` as a list of ints."""
    items = list(value) if isinstance(value, (list, tuple, ListConfig)) else str(value).split(",")
    try:
        numbers = list(dict.fromkeys(int(str(v).strip()) for v in items))
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number or a list of numbers") from None
    if not numbers or (allowed is not None and any(n not in allowed for n in numbers)) or min(numbers) < 1:
        raise ValueError(f"{name}={value!r}: expected {'one of ' + str(list(allowed)) if allowed else 'positive numbers'}")
    return numbers


class FewShotRun:
    """One invocation: the meme table, the generator and every answer given (memoised by prompt)."""

    def __init__(self, table: MemeTable, generator: FewShotGenerator, prompt: FewShotPrompt, seed: int) -> None:
        self.table, self.generator, self.prompt, self.seed = table, generator, prompt, seed
        self.memo: dict[tuple[int, str, tuple[str, ...]], str] = {}
        self.rows: list[dict[str, Any]] = []

    def ask(self, stage: int, queries: Sequence[int], chosen: Any) -> list[str]:
        """Generations for each query with its exemplars (rows of `chosen`); a prompt asked before is not asked again."""
        records = self.table.records
        keys = [(stage, records[q]["id"], tuple(records[e]["id"] for e in row)) for q, row in zip(queries, chosen)]
        todo = {}
        for key, query, row in zip(keys, queries, chosen):
            if key not in self.memo and key not in todo:
                exemplars = [records[e] for e in row]
                todo[key] = (self.prompt.messages(exemplars, records[query], stage), [*exemplars, records[query]])
        for key, text in zip(todo, self.generator.answer(list(todo.values()))):
            self.memo[key] = text
        return [self.memo[key] for key in keys]

    def score(
        self, phase: str, strategy: str, stage: int, shots: int, queries: Sequence[int], pool: Sequence[int], alpha: float | None
    ) -> dict[str, Any]:
        """Retrieve, ask, parse and score one (strategy, stage, shots) over `queries`; every answer becomes a row."""
        records = self.table.records
        chosen, unranked = self.table.retrieve(strategy, queries, pool, shots, self.seed, alpha)
        texts = self.ask(stage, queries, chosen)
        gold = [stage_label(records[q], stage) for q in queries]
        predicted = [parse_stage_answer(text, stage) for text in texts]
        classes = STAGE_CLASSES[stage]
        for query, row, text, g, p in zip(queries, chosen, texts, gold, predicted):
            self.rows.append(
                {
                    "phase": phase,
                    "strategy": strategy,
                    "stage": stage,
                    "shots": shots,
                    "alpha": "" if alpha is None else alpha,
                    "id": records[query]["id"],
                    "exemplars": " ".join(records[e]["id"] for e in row),
                    "gold": classes[g],
                    "prediction": "" if p is None else classes[p],
                    "generation": text,
                }
            )
        scores = stage_scores(gold, predicted)
        return {"strategy": strategy, "stage": stage, "shots": shots, "alpha": alpha, **scores, "unranked": unranked}

    def choose_alpha(self, strategy: str, stage: int, shots: int, pool: Sequence[int], settings: DictConfig) -> dict[str, Any]:
        """α by macro F1 on a held-out part of the training pool, exemplars from the rest of it (never the test memes)."""
        if settings.fixed is not None:
            return {"strategy": strategy, "stage": stage, "shots": shots, "chosen": float(settings.fixed), "fixed": True}
        ids = [self.table.records[p]["id"] for p in pool]
        held, rest = heldout_split(ids, int(settings.heldout_size), self.seed)
        held_pool, rest_pool = [pool[i] for i in held], [pool[i] for i in rest]
        scores = {}

        def macro_f1(alpha: float) -> float:
            scores[alpha] = self.score("alpha_search", strategy, stage, shots, held_pool, rest_pool, alpha)
            return scores[alpha]["macro_f1"]

        chosen, by_alpha = search_alpha(list(settings.grid), macro_f1)
        return {
            "strategy": strategy,
            "stage": stage,
            "shots": shots,
            "grid": list(by_alpha),
            "macro_f1": list(by_alpha.values()),
            "invalid": [scores[a]["invalid"] for a in by_alpha],
            "chosen": chosen,
            "heldout_size": len(held_pool),
            "exemplar_pool_size": len(rest_pool),
            "fixed": False,
        }


def build_table(
    settings: DictConfig, records: list[dict[str, Any]], strategies: list[str], dataset_key: str, dataset: str, device: torch.device
) -> tuple[MemeTable, dict]:
    """The memes with the embeddings the strategies need (read from the cache, or computed once and cached)."""
    uses_image = any(STRATEGIES[s][0] for s in strategies)
    uses_tags = any(STRATEGIES[s][1] for s in strategies)
    generated = (
        read_tags_file(settings.tags_file, dataset)
        if settings.tags_file and any(STRATEGIES[s][1] == "generated" for s in strategies)
        else {}
    )
    vocabulary = tag_vocabulary(records, generated)
    index = {t: i for i, t in enumerate(vocabulary)}
    positions = {r["id"]: p for p, r in enumerate(records)}
    unknown = [i for i in generated if i not in positions]
    if unknown:
        raise ValueError(f"fewshot.tags_file {settings.tags_file}: {len(unknown)} ids are not memes of the dataset (first: {unknown[0]})")
    info: dict[str, Any] = {}
    image_vectors = tag_vectors = None
    if uses_image or uses_tags:
        identity = model_identity(str(settings.clip))
        info["clip"] = {"name_or_path": str(settings.clip), "identity": identity}
        encoder: list[ClipEncoder] = []

        def clip() -> ClipEncoder:
            if not encoder:
                encoder.append(ClipEncoder(str(settings.clip), int(settings.clip_batch_size), device))
            return encoder[0]

        if uses_image:
            path = cache_file(settings.cache_dir, "images", dataset_key, identity)
            by_id = {r["id"]: r for r in records}
            image_vectors, hit = cached_embeddings(
                path, [r["id"] for r in records], lambda ids: clip().images([by_id[i]["image"] for i in ids], ids), identity
            )
            info["image_cache"] = {"file": str(path), "read_from_cache": hit}
            say(f"[fewshot] image embeddings of {len(records)} memes: {'read from' if hit else 'computed and cached in'} {path}")
        if uses_tags:
            if not vocabulary:
                raise ValueError("the tag strategies need tags, but no meme of the dataset (nor the tags file) has any")
            key = "tags-" + hashlib.sha256(json.dumps(vocabulary).encode()).hexdigest()[:12]
            path = cache_file(settings.cache_dir, "tags", key, identity)
            tag_vectors, hit = cached_embeddings(path, vocabulary, lambda texts: clip().texts(texts), identity)
            info["tag_cache"] = {"file": str(path), "read_from_cache": hit, "tags": len(vocabulary)}
            say(f"[fewshot] text embeddings of {len(vocabulary)} tags: {'read from' if hit else 'computed and cached in'} {path}")
    table = MemeTable(
        records=records,
        image_vectors=image_vectors,
        tag_vectors=tag_vectors,
        gt_tags=[index_tags(r.get("meta", {}).get("tags", []), index) for r in records],
        generated_tags={positions[i]: index_tags(tags, index) for i, tags in generated.items()},
    )
    return table, info


def read_memes(cfg: DictConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every meme of the dataset (shards converted first if missing) and its manifest; stage II must be four-way."""
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    manifest = read_manifest(datamodule.dataset_dir)
    heads = manifest["heads"]
    if any(head not in heads for head in STAGE_HEADS.values()):
        raise ValueError(
            f"{datamodule.dataset_dir}: few-shot prompting needs the ToxicTags heads {list(STAGE_HEADS.values())}, found {sorted(heads)}"
        )
    if list(heads["toxic_type"].get("classes", [])) != list(STAGE_CLASSES[2]):
        raise ValueError(
            f"{datamodule.dataset_dir}: head toxic_type has classes {heads['toxic_type'].get('classes')}, not the study's four-way "
            f"{list(STAGE_CLASSES[2])} (shards written by an older converter: convert again)"
        )
    return read_samples(datamodule.dataset_dir, None, datamodule.remote), manifest


def write_report(out: Path, summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "answers.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ANSWER_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = [
        f"# ToxicTags few-shot prompting: {summary['model']} ({summary['family']})",
        "",
        f"Exemplars from {summary['pool_splits']}, queries from {summary['splits']}; macro F1 % (scikit-learn), invalid answers count as wrong.",
        "",
        results_markdown(summary["results"], summary["study"]),
    ]
    for search in summary["alpha_search"]:
        head = f"- {search['strategy']}, {STAGE_NAMES[search['stage']]}, {search['shots']}-shot: "
        if search["fixed"]:
            lines.append(head + f"α = {search['chosen']:g} fixed by fewshot.alpha.fixed (no search)")
            continue
        grid = ", ".join(f"{a:g}: {100 * f:.2f}" for a, f in zip(search["grid"], search["macro_f1"]))
        lines.append(
            head + f"α = {search['chosen']:g} chosen on {search['heldout_size']} held-out training memes "
            f"(exemplars from the other {search['exemplar_pool_size']}); macro F1 % per α: {grid}"
        )
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def run(cfg: DictConfig) -> dict[str, Any]:
    """Every (stage, shots, strategy) asked for, answered and scored; the report written to `<run dir>/fewshot/`."""
    configure_console()
    for key in ("selection", "shots", "stage", "fewshot"):
        if cfg.get(key) is None:
            raise ValueError(f"`{key}` is not set: run the few-shot recipe, e.g. `crossmod fewshot experiment=toxictags_fewshot`")
    settings = cfg.fewshot
    strategies = strategies_asked(
        OmegaConf.to_object(cfg.selection) if isinstance(cfg.selection, ListConfig) else cfg.selection, settings.tags_file
    )
    stages, shots_list = int_list(cfg.stage, "stage", (1, 2)), int_list(cfg.shots, "shots")
    prompt = FewShotPrompt.from_config(OmegaConf.to_container(settings.prompt, resolve=True))
    if set(settings.splits) & set(settings.pool_splits):
        raise ValueError(
            f"fewshot.splits {list(settings.splits)} and fewshot.pool_splits {list(settings.pool_splits)} overlap: exemplars come from train only"
        )
    records, manifest = read_memes(cfg)
    trainer = scoring_trainer(cfg.trainer)  # the trainer= group: device, precision, processes, ZeRO-3 (every chat once)
    device = trainer.strategy.root_device  # this process's device: CLIP embeddings for retrieval
    table, embedding_info = build_table(
        settings, records, strategies, f"{manifest['dataset']}-{manifest['fingerprint']}", manifest["dataset"], device
    )
    model_cfg = cfg.model
    generator = FewShotGenerator(
        str(model_cfg.name_or_path),
        trainer,
        family=OmegaConf.to_container(model_cfg.family) if isinstance(model_cfg.family, DictConfig) else model_cfg.family,
        dtype=model_cfg.fusion.dtype,
        attn_implementation=model_cfg.fusion.attn_implementation,
        image_size=model_cfg.preprocessor.image_size,
        min_pixels=model_cfg.preprocessor.min_pixels,
        max_pixels=model_cfg.preprocessor.max_pixels,
        batch_size=int(settings.batch_size),
        max_new_tokens=int(settings.max_new_tokens),
        num_workers=int(settings.get("num_workers", 0)),
        vision_cache=model_cfg.fusion.get("vision_cache", "auto"),
        vision_cache_dir=model_cfg.fusion.get("vision_cache_dir"),
    )
    session = FewShotRun(table, generator, prompt, int(cfg.seed))
    results, searches, counts = [], [], {}
    for stage in stages:
        asked = [p for p, r in enumerate(records) if stage_label(r, stage) is not None]
        pool = [p for p in asked if records[p]["split"] in settings.pool_splits]
        queries = [p for p in asked if records[p]["split"] in settings.splits]
        if not queries or not pool:
            raise ValueError(
                f"{STAGE_NAMES[stage]}: {len(queries)} memes in {list(settings.splits)}, {len(pool)} in {list(settings.pool_splits)}"
            )
        counts[stage] = {"queries": len(queries), "pool": len(pool)}
        for shots in shots_list:
            for strategy in strategies:
                alpha = None
                if needs_alpha(strategy):
                    search = session.choose_alpha(strategy, stage, shots, pool, settings.alpha)
                    searches.append(search)
                    alpha = search["chosen"]
                result = session.score("test", strategy, stage, shots, queries, pool, alpha)
                results.append(result)
                unranked = f" ({result['unranked']} queries it could not rank: exemplars in pool order)" if result["unranked"] else ""
                say(f"[fewshot] {STAGE_NAMES[stage]} {shots}-shot {strategy}: macro F1 {100 * result['macro_f1']:.2f}{unranked}")
    summary = {
        "model": str(model_cfg.name_or_path),
        "family": generator.family.name,
        "model_type": model_type(str(model_cfg.name_or_path)),
        "dataset": manifest["dataset"],
        "fingerprint": manifest["fingerprint"],
        "pool_splits": list(settings.pool_splits),
        "splits": list(settings.splits),
        "seed": int(cfg.seed),
        "max_new_tokens": int(settings.max_new_tokens),
        "greedy": True,
        "stages": stages,
        "shots": shots_list,
        "strategies": strategies,
        "memes": {str(k): v for k, v in counts.items()},
        "results": results,
        "alpha_search": searches,
        "study": dict(OmegaConf.to_container(settings.study)) if settings.get("study") else {},
        **embedding_info,
    }
    if not trainer.is_global_zero:  # every rank answered its share and holds every answer; rank 0 writes
        return summary
    text = write_report(Path(cfg.paths.output_dir) / "fewshot", summary, session.rows)
    print(text, flush=True)
    return summary

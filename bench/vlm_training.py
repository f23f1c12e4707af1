"""VLM LoRA training: crossmod against transformers.Trainer + PEFT on the same model, memes, LoRA and heads.

    python bench/vlm_training.py [--smoke] [--repeats 3] [--steps 8] [--batch-size 4] [--hidden 512] [--layers 4]

The model is a randomly initialised Qwen2-VL built like a real checkpoint (`crossmod.models.tiny.qwen_vl`, hidden
`--hidden`, `--layers` decoder layers, the builder's small vision tower, images resized by the processor
to `--image-pixels`), big enough that the model, not Python, dominates a CPU step. The memes are 512×512
JPEGs (bench/rendered_memes.py) with captions of one to four sentences in en/de/es/hi/zh (a spread of
lengths), five culture labels each, the prompt with the caption (`model.prompt.input=image_caption`).
Both variants train LoRA (q, v of the language model, r 8, α 16, dropout 0.05) and one linear layer of
five culture logits on the last real token's hidden state, AdamW lr 2e-4, for `--steps` steps of
`--batch-size` memes, from the same weights:

- `crossmod`: `train.py`'s pieces — `MemeClassifier` composed from `model=vlm`, `MemeDataModule` streaming
  the memes from shards, a Lightning `Trainer` (no logger, checkpoints or progress bar);
  `crossmod_grouped` adds `data.group_by_length=true`.
- `hf`: what a user would otherwise write — `Qwen2VLForConditionalGeneration` + `peft.get_peft_model`, a
  `nn.Linear` head on the same hidden state, `transformers.Trainer` over a map-style dataset of files (one
  JPEG + one JSON per meme), a collator that pads each batch to its longest meme (the processor's
  `padding=True`, as `DataCollatorWithPadding`). Its files are named in the order crossmod's seeded stream
  trains them and read sequentially (`train_sampling_strategy="sequential"`), so both variants train the same
  batches: the time ratio compares the same tensor work (checked on every round's meme ids). crossmod's vision
  feature cache is off (`model.fusion.vision_cache=false`): both run the vision tower on every step.

Time per meme: wall time from the end of step `--warmup` to the end of the last step, over the memes of
those steps; rounds interleaved in this process in balanced orders (ABC, CBA, BCA, ACB, CAB, BAC), one torch thread each. Peak memory:
each variant trains the same steps again in fresh processes (one per round, interleaved) and reports how far its resident set
size rose above the size after the imports every variant shares (the kernel's peak mark `VmHWM`, reset
through `/proc/self/clear_refs` after those imports): the model, data, optimizer and steps of one variant,
plus what its own code imports; a second fresh process per variant and round makes those own imports (crossmod's
modules, Hydra and the composed config) before the mark is reset, so the training alone is compared too. Padding: real tokens / computed tokens
(attention mask sum / its size) of every training batch, and for the text families the same share with
the MiniLM tokenizer on 2,000 captions drawn like these, shuffled against grouped (bench/text_padding.py).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, Result, bare_trainer, build_model, compose, interleave, parser, repeats  # noqa: E402
from hf_baseline import LastTokenClassifier, training_arguments  # noqa: E402
from peak_rss import peak_rss, reset_peak_rss  # noqa: E402
from rendered_memes import CAPTIONS, LANGS, draw_caption, render  # noqa: E402
from text_padding import TEXT_BATCH_SIZES, text_padding  # noqa: E402

NAME = "vlm_training"
CULTURES = ("US", "DE", "MX", "IN", "CN")
HEADS = {culture: {"kind": "binary"} for culture in CULTURES}
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.05}
LR = 2e-4
TIME_TARGET = MEMORY_TARGET = 1.0
PADDING_TARGET = 0.95


# ---------------------------------------------------------------------------------------------- memes
def make_memes(count: int, seed: int = 0) -> list:
    """`count` memes: a rendered 512 px picture, a caption of 1–4 sentences of its language, random labels."""
    import numpy as np

    from crossmod.data.sample import Sample

    rng = np.random.default_rng(seed)
    memes = []
    for i in range(count):
        lang = LANGS[i % len(LANGS)]
        picks, text = draw_caption(rng, lang)
        image, _ = render(lang, int(picks[0]), seed=seed * 100_000 + i)
        labels = {culture: int(v) for culture, v in zip(CULTURES, rng.integers(0, 2, size=len(CULTURES)))}
        memes.append(Sample(id=f"bench/{i}", group=f"bench/{i}", lang=lang, text=text, image=image, labels=labels, split="train"))
    return memes


def write_shards_for(memes: list, folder: Path) -> Path:
    from crossmod.data.shards import write_shards

    validation = [type(m)(**{**vars(m), "id": m.id + "/val", "group": m.group + "/val", "split": "val"}) for m in memes[:4]]
    write_shards(memes + validation, folder, dataset="bench", heads=HEADS, params={"bench": NAME}, maxcount=64)
    return folder


def write_files(memes: list, folder: Path, order: list[str]) -> Path:
    """One JPEG + one JSON per meme of `order` (crossmod's training order, a meme again where its resampled
    stream repeats one), then the other memes, named so that a sequential sampler over the sorted names trains
    the batches crossmod trains."""
    folder.mkdir(parents=True, exist_ok=True)
    by_id = {meme.id: meme for meme in memes}
    memes = [by_id[meme_id] for meme_id in order] + [meme for meme in memes if meme.id not in set(order)]
    for n, meme in enumerate(memes):
        (folder / f"{n:06d}.jpg").write_bytes(meme.image)
        (folder / f"{n:06d}.json").write_text(json.dumps({"id": meme.id, "text": meme.text, "lang": meme.lang, "labels": meme.labels}))
    return folder


# ---------------------------------------------------------------------------------------------- crossmod
def crossmod_model(folder: Path, image_pixels: int, threads_seed: int = 0):
    import torch

    torch.manual_seed(threads_seed)
    overrides = [
        "model=vlm",
        f"model.name_or_path={folder}",
        "model.prompt.input=image_caption",
        f"model.preprocessor.min_pixels={image_pixels}",
        f"model.preprocessor.max_pixels={image_pixels}",
        f"model.optimizer.lr={LR}",
        # the tower runs every step, as in the transformers.Trainer variant: the same tensor work (the cache's gain is
        # bench/vision_cache.py's); `auto` would also read features an earlier round or run stored
        "model.fusion.vision_cache=false",
    ]
    model, _ = build_model(overrides)
    return model


def crossmod_data(shards: Path, preprocessor, args, grouped: bool):
    from crossmod.data.memes import MemeDataModule

    datamodule = MemeDataModule(
        heads=HEADS,
        shard_dir=str(shards),
        batch_size=args.batch_size,
        num_workers=args.workers,
        shuffle_buffer=64,
        group_by_length=grouped,
        length_groups=8,
        seed=0,
    )
    datamodule.connect(preprocessor)
    return datamodule


def crossmod_order(folder: Path, shards: Path, args) -> list[str]:
    """The meme ids of crossmod's (ungrouped) training batches, in order: the stream is seeded, so every round
    trains these; the transformers.Trainer variant is given the same order, so both do the same tensor work."""
    datamodule = crossmod_data(shards, crossmod_model(folder, args.image_pixels).preprocessor, args, grouped=False)
    datamodule.setup("fit")
    ids: list[str] = []
    for batch in datamodule.train_dataloader():
        ids += batch["ids"]
        if len(ids) >= args.steps * args.batch_size:
            return ids
    raise RuntimeError(f"crossmod's training stream gave {len(ids)} memes, fewer than {args.steps} steps need")


def train_crossmod(folder: Path, shards: Path, args, grouped: bool) -> dict[str, Any]:
    import lightning as L

    model = crossmod_model(folder, args.image_pixels)
    datamodule = crossmod_data(shards, model.preprocessor, args, grouped)
    times: list[float] = []
    shares: list[float] = []
    ids: list[str] = []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            mask = batch["attention_mask"]
            shares.append(float(mask.sum()) / mask.numel())
            ids.extend(batch["ids"])

        def on_train_batch_end(self, *args) -> None:
            times.append(time.perf_counter())

    trainer = bare_trainer(max_steps=args.steps, limit_val_batches=0, callbacks=[Record()])
    trainer.fit(model, datamodule=datamodule)
    return measured(times, shares, args, ids)


# ---------------------------------------------------------------------------------------------- transformers
def train_hf(folder: Path, files: Path, args) -> dict[str, Any]:
    import torch
    from PIL import Image
    from transformers import AutoProcessor, Trainer, TrainerCallback

    from crossmod.models.vlm.prompts import PromptSpec

    torch.manual_seed(0)
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=False)
    processor.image_processor.min_pixels = processor.image_processor.max_pixels = args.image_pixels
    processor.image_processor.size = {"shortest_edge": args.image_pixels, "longest_edge": args.image_pixels}
    processor.tokenizer.padding_side = "left"
    prompt = PromptSpec(**prompt_config())

    class Files(torch.utils.data.Dataset):
        def __init__(self, root: Path) -> None:
            self.items = sorted(root.glob("*.json"))

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, index: int) -> dict[str, Any]:
            record = json.loads(self.items[index].read_text())
            with Image.open(self.items[index].with_suffix(".jpg")) as image:
                image = image.convert("RGB")
            chat = processor.apply_chat_template(prompt.message(record["text"], record["lang"]), add_generation_prompt=True, tokenize=False)
            return {"chat": chat, "image": image, "labels": [record["labels"][c] for c in CULTURES], "id": record["id"]}

    shares: list[float] = []
    seen: list[str] = []

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = processor(
            text=[f["chat"] for f in features],
            images=[[f["image"]] for f in features],
            padding=True,
            add_special_tokens=False,
            return_tensors="pt",
        )
        return {**batch, "labels": torch.tensor([f["labels"] for f in features], dtype=torch.float), "ids": [f["id"] for f in features]}

    class Classifier(LastTokenClassifier):
        def forward(self, labels: torch.Tensor, ids: list[str], **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
            mask = inputs["attention_mask"]  # read here, in the training process (the collator runs in loader workers)
            shares.append(float(mask.sum()) / mask.numel())
            seen.extend(ids)
            return super().forward(labels, **inputs)

    times: list[float] = []

    class Record(TrainerCallback):
        def on_step_end(self, *args, **kwargs) -> None:
            times.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        training = training_arguments(  # sequential: the files are named in crossmod's training order, so the same batches
            out,
            LR,
            per_device_train_batch_size=args.batch_size,
            max_steps=args.steps,
            dataloader_num_workers=args.workers,
        )
        Trainer(
            model=Classifier(folder, len(CULTURES), LORA),
            args=training,
            train_dataset=Files(files),
            data_collator=collate,
            callbacks=[Record()],
        ).train()
    return measured(times, shares, args, seen)


def prompt_config() -> dict[str, Any]:
    """The `model.prompt` block crossmod's variant composes (same prompt text for both variants)."""
    from omegaconf import OmegaConf

    cfg = compose(["model=vlm", "model.prompt.input=image_caption"])
    return OmegaConf.to_container(cfg.model.prompt, resolve=True)


def measured(times: list[float], shares: list[float], args, ids: list[str]) -> dict[str, Any]:
    steps = len(times) - 1 - args.warmup
    if steps < 1:
        raise RuntimeError(f"{len(times)} steps ran; --steps must exceed --warmup + 1")
    return {
        "s_per_meme": (times[-1] - times[args.warmup]) / (steps * args.batch_size),
        "real_token_share": sum(shares[: args.steps]) / len(shares[: args.steps]),
        "ids": ids[: args.steps * args.batch_size],
    }


# ---------------------------------------------------------------------------------------------- driver
def own_imports(variant: str) -> None:
    """What the variant's code imports and sets up beyond the shared libraries: crossmod's modules, Hydra and
    its composed config; the transformers.Trainer variant needs nothing more."""
    if variant.startswith("crossmod"):
        import crossmod.data.memes  # noqa: F401
        import crossmod.models.module  # noqa: F401
        import crossmod.models.vlm.classifier  # noqa: F401
        import crossmod.models.vlm.preprocess  # noqa: F401

        prompt_config()


def peak_memory(variant: str, argv: list[str], own_imports_first: bool = False) -> float:
    """Peak RSS (MiB) above the resting size after imports, of a fresh process that builds the variant and trains
    its steps once (the kernel's own peak mark, reset after the imports every variant shares; with
    `own_imports_first` also after the variant's own imports, so what remains is the training alone)."""
    extra = ["--own-imports-first"] if own_imports_first else []
    out = subprocess.run([sys.executable, __file__, *argv, "--memory-of", variant, *extra], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"memory run of {variant} failed:\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak_above_resting_mib"])


def main() -> None:
    # 6 = 2 × 3 variants: balanced orders (common.interleave); and one process's memory peak scatters by ±20 MiB
    p = parser(__doc__.splitlines()[0], default_repeats=6)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None, help="steps not timed (default 2, smoke 1)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--image-pixels", type=int, default=None, help="pixels the processor resizes each image to (default 224²)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (same for every variant)")
    p.add_argument("--work", type=Path, default=None, help=argparse_hidden())
    p.add_argument("--memory-of", default=None, help=argparse_hidden())
    p.add_argument("--own-imports-first", action="store_true", help=argparse_hidden())
    args = p.parse_args()
    smoke = args.smoke
    args.steps = args.steps or (3 if smoke else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if smoke else 2)
    args.batch_size = args.batch_size or (2 if smoke else 4)
    args.hidden = args.hidden or (64 if smoke else 512)
    args.layers = args.layers or (2 if smoke else 4)
    args.image_pixels = args.image_pixels or (56 * 56 if smoke else 224 * 224)

    import torch

    torch.set_num_threads(args.threads)
    if args.memory_of:
        import lightning  # noqa: F401  (imports first: their transient peak is no variant's)
        import peft  # noqa: F401
        import transformers  # noqa: F401

        if args.own_imports_first:
            own_imports(args.memory_of)
        resting = reset_peak_rss()
        run_variant(args.memory_of, args.work, args)
        print(json.dumps({"peak_above_resting_mib": (peak_rss() - resting) / 2**20, "peak_mib": peak_rss() / 2**20}))
        return

    with tempfile.TemporaryDirectory(prefix="crossmod-vlm-bench-") as tmp:
        work = Path(tmp)
        prepare(work, args)
        variants = {name: (lambda name=name: run_variant(name, work, args)) for name in ("crossmod", "crossmod_grouped", "hf")}
        runs = interleave(variants, repeats(args))
        same_memes(runs, work)
        small = small_size(args)
        prepare(work / "small", small)
        small_runs = interleave(
            {name: (lambda name=name: run_variant(name, work / "small", small)) for name in ("crossmod", "hf")}, repeats(args)
        )
        same_memes(small_runs, work / "small")
        argv = [a for a in sys.argv[1:] if a != "--smoke"] + (["--smoke"] if smoke else []) + ["--work", str(work)]
        # Several fresh processes per variant, interleaved: one process's peak scatters by ±15 MiB (glibc arenas,
        # the loader worker's timing), more than the difference under test.
        memory: dict[str, list[float]] = {name: [] for name in variants}
        training: dict[str, list[float]] = {"crossmod": [], "hf": []}
        for _ in range(repeats(args)):
            for name in variants:
                memory[name].append(peak_memory(name, argv))
            for name in training:
                training[name].append(peak_memory(name, argv, own_imports_first=True))
        memes = json.loads((work / "meta.json").read_text())
    report(runs, memory, training, memes, args, small_runs, small, text_padding())


def time_finding(runs: dict[str, list[dict]], small_runs: dict[str, list[dict]], small) -> str:
    """Per-round ratios of the same tensor work, and whether they differ from 1 beyond the rounds' scatter
    (scipy's Wilcoxon signed-rank test on the log ratios, two-sided, exact for few rounds)."""
    from scipy.stats import wilcoxon

    def describe(values: dict[str, list[dict]]) -> str:
        ratios = [c["s_per_meme"] / h["s_per_meme"] for c, h in zip(values["crossmod"], values["hf"])]
        faster = sum(r < 1 for r in ratios)
        test = f", Wilcoxon p = {wilcoxon([math.log(r) for r in ratios]).pvalue:.2f}" if len(ratios) >= 2 else ""
        return (
            f"{min(ratios):.3f}–{max(ratios):.3f} per round (median {statistics.median(ratios):.3f}; crossmod faster in "
            f"{faster} of {len(ratios)} rounds{test})"
        )

    return (
        f"Both variants trained the same memes in the same batches (checked by meme id every round), so each ratio "
        f"compares the same tensor work. crossmod / transformers.Trainer: {describe(runs)}; where the model is small "
        f"enough for the loops' own cost to be a larger share of a step (hidden {small.hidden}, {small.layers} layers): "
        f"{describe(small_runs)}."
    )


def memory_finding(memory: dict[str, list[float]], training: dict[str, list[float]]) -> str:
    median = {name: statistics.median(values) for name, values in memory.items()}
    alone = {name: statistics.median(values) for name, values in training.items()}
    return (
        f"Peak RSS above the resting size, median of {len(memory['crossmod'])} fresh processes each (interleaved): crossmod "
        f"{median['crossmod']:.0f} MiB, crossmod with grouping {median['crossmod_grouped']:.0f} MiB, transformers.Trainer + PEFT "
        f"{median['hf']:.0f} MiB; with each variant's own imports made first (crossmod: its modules, Hydra and the composed config): "
        f"{alone['crossmod']:.0f} vs {alone['hf']:.0f} MiB. Single processes of the same variant differ by up to "
        f"{max(max(v) - min(v) for v in memory.values()):.0f} MiB."
    )


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def prepare(work: Path, args) -> None:
    """The model folder, the shards and the files, once; every round and the memory runs read them."""
    from crossmod.models.tiny.qwen_vl import build_tiny_qwen_vl

    count = args.steps * args.batch_size * 2
    memes = make_memes(count)
    corpus = [m.text for m in memes] + [t.replace(" | ", " ") for lang in LANGS for t in CAPTIONS[lang]]
    build_tiny_qwen_vl(work / "model", corpus, image_pixels=args.image_pixels, hidden_size=args.hidden, num_layers=args.layers)
    write_shards_for(memes, work / "shards")
    order = crossmod_order(work / "model", work / "shards", args)
    write_files(memes, work / "files", order)
    (work / "meta.json").write_text(json.dumps({"count": count, "order": order}))


def small_size(args):
    """The framework-cost comparison's sizes: a model so small that the loops around it, not its tensors, take
    most of a step (hidden 64, 2 layers, 56² px images, 40 steps of 4 memes)."""
    import argparse

    return argparse.Namespace(
        **{**vars(args), "hidden": 64, "layers": 2, "image_pixels": 56 * 56, "batch_size": 4, "steps": 40, "warmup": 5}
    )


def run_variant(name: str, work: Path, args) -> dict[str, Any]:
    if name == "hf":
        return train_hf(work / "model", work / "files", args)
    return train_crossmod(work / "model", work / "shards", args, grouped=name == "crossmod_grouped")


def same_memes(runs: dict[str, list[dict]], work: Path) -> None:
    """Both variants trained exactly the memes of crossmod's recorded order (`prepare`), batch by batch (else the
    times compare different tensor work); checked as soon as the rounds end."""
    order = json.loads((work / "meta.json").read_text())["order"]
    for name in ("crossmod", "hf"):
        if any(v["ids"] != order for v in runs[name]):
            raise RuntimeError(f"{name} trained other memes than crossmod's recorded order: the times are not comparable")


def report(
    runs: dict[str, list[dict]],
    memory: dict[str, list[float]],
    training: dict[str, list[float]],
    memes: dict,
    args,
    small_runs: dict[str, list[dict]],
    small,
    text: dict[str, Any],
) -> None:
    result = Result(
        NAME,
        "Is crossmod's VLM LoRA training as fast and as lean as transformers.Trainer + PEFT on the same model and memes, and "
        "how much of each batch is padding?",
        args,
        {
            "model": f"random Qwen2-VL, hidden {args.hidden}, {args.layers} layers, the tiny builder's vision tower, images at {args.image_pixels} px",
            "memes": memes["count"],
            "steps": args.steps,
            "warmup_steps": args.warmup,
            "batch_size": args.batch_size,
            "lora": LORA,
            "threads": args.threads,
            "workers": args.workers,
        },
    )
    for name, values in runs.items():
        result.variant(name, "s/meme", [v["s_per_meme"] for v in values])
    time_ratio = result.paired(
        "time_crossmod_vs_hf",
        [v["s_per_meme"] for v in runs["crossmod"]],
        [v["s_per_meme"] for v in runs["hf"]],
        "crossmod / hf, s per meme",
    )
    result.paired(
        "time_grouped_vs_hf",
        [v["s_per_meme"] for v in runs["crossmod_grouped"]],
        [v["s_per_meme"] for v in runs["hf"]],
        "crossmod_grouped / hf, s per meme",
    )
    result.target("time_vs_hf", time_ratio, "<=", TIME_TARGET, "crossmod's time per meme / transformers.Trainer + PEFT's")
    result.row(
        "VLM LoRA step, s/meme: crossmod vs transformers.Trainer + PEFT", "crossmod", "hf", "time_crossmod_vs_hf", "time_vs_hf", unit="s"
    )
    result.row("same, crossmod with data.group_by_length=true", "crossmod_grouped", "hf", "time_grouped_vs_hf", unit="s")
    for name in ("crossmod", "hf"):
        result.variant(f"small_{name}", "s/meme", [v["s_per_meme"] for v in small_runs[name]])
    result.paired(
        "small_time_crossmod_vs_hf",
        [v["s_per_meme"] for v in small_runs["crossmod"]],
        [v["s_per_meme"] for v in small_runs["hf"]],
        "crossmod / hf, s per meme, on a model small enough that the training loops' own cost shows",
    )
    result.row(
        f"same at a size where the loops show (hidden {small.hidden}, {small.layers} layers, {math.isqrt(small.image_pixels)}² px images, {small.steps} steps)",
        "small_crossmod",
        "small_hf",
        "small_time_crossmod_vs_hf",
        scale=1000,
        unit="ms",
    )
    result.finding(time_finding(runs, small_runs, small))
    for name, values in memory.items():
        result.variant(f"peak_rss_{name}", "MiB", values, over="fresh processes, interleaved")
    memory_ratio = result.paired(
        "memory_crossmod_vs_hf",
        memory["crossmod"],
        memory["hf"],
        "peak RSS above the resting size after imports, crossmod's fresh process / hf's of the same round",
    )
    result.target("memory_vs_hf", memory_ratio, "<=", MEMORY_TARGET, "crossmod's peak RSS / transformers.Trainer + PEFT's")
    result.row(
        "VLM LoRA training, peak RSS: crossmod vs transformers.Trainer + PEFT",
        "peak_rss_crossmod",
        "peak_rss_hf",
        "memory_crossmod_vs_hf",
        "memory_vs_hf",
        unit="MiB",
    )
    for name, values in training.items():
        result.variant(f"training_rss_{name}", "MiB", values, over="fresh processes, interleaved")
    result.paired("training_memory_crossmod_vs_hf", training["crossmod"], training["hf"], "the same, each variant's own imports made first")
    result.row(
        "same, training alone (each variant's own imports and config made before the peak mark is reset)",
        "training_rss_crossmod",
        "training_rss_hf",
        "training_memory_crossmod_vs_hf",
        unit="MiB",
    )
    result.finding(memory_finding(memory, training))
    shares = {name: statistics.median(v["real_token_share"] for v in values) for name, values in runs.items()}
    result.payload["real_token_share"] = {"vlm": shares, "text_minilm": text}
    for name in ("crossmod", "crossmod_grouped"):
        result.variant(f"share_{name}", "share", [v["real_token_share"] for v in runs[name]])
    result.ratio(
        "grouped_real_token_share", shares["crossmod_grouped"], "real tokens / computed tokens of crossmod's grouped training batches"
    )
    result.target(
        "real_token_share", shares["crossmod_grouped"], ">=", PADDING_TARGET, "real-token share of training batches with group_by_length"
    )
    result.row(
        "VLM training batches, real-token share: grouped vs shuffled",
        "share_crossmod_grouped",
        "share_crossmod",
        "grouped_real_token_share",
        "real_token_share",
        scale=100,
        unit="%",
    )
    over = f"one pass over {text['captions']} captions"
    for batch_size in TEXT_BATCH_SIZES:
        for order in ("shuffled", "grouped"):
            result.variant(f"text_share_{order}_{batch_size}", "share", [text[f"batch_{batch_size}"][order]], over=over)
        grouped = text[f"batch_{batch_size}"]["grouped"]
        result.ratio(f"text_grouped_share_{batch_size}", grouped, f"real tokens / computed tokens of grouped text batches of {batch_size}")
        result.target(
            f"text_real_token_share_{batch_size}",
            grouped,
            ">=",
            PADDING_TARGET,
            f"real-token share of text-model training batches of {batch_size} with group_by_length (length_groups {text['length_groups']})",
        )
        result.row(
            f"text training batches of {batch_size} (MiniLM tokenizer, {text['captions']} captions), real-token share: grouped "
            f"(length_groups {text['length_groups']}) vs shuffled",
            f"text_share_grouped_{batch_size}",
            f"text_share_shuffled_{batch_size}",
            f"text_grouped_share_{batch_size}",
            f"text_real_token_share_{batch_size}",
            scale=100,
            unit="%",
        )
    text_shares = "; ".join(
        f"batch {b}: shuffled {text[f'batch_{b}']['shuffled']:.3f}, grouped {text[f'batch_{b}']['grouped']:.3f}" for b in TEXT_BATCH_SIZES
    )
    result.finding(
        f"Real tokens / computed tokens per training batch: VLM (batch {args.batch_size}, {memes['count']} memes, length_groups 8) "
        f"shuffled {shares['crossmod']:.3f} (transformers.Trainer, the same batches, {shares['hf']:.3f}), grouped "
        f"{shares['crossmod_grouped']:.3f}; text models (MiniLM tokenizer, {text['captions']} captions of {text['tokens']['min']}–"
        f"{text['tokens']['max']} tokens, median {text['tokens']['median']:g}, length_groups {text['length_groups']} as the data "
        f"configs set it) {text_shares}."
    )
    result.note("CPU only: times and memory are this machine's, as ratios between variants measured in the same run; no GPU figure.")
    result.write()


if __name__ == "__main__":
    main()

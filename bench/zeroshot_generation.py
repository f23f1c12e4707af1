"""Zero-shot generation: batched against one-meme-at-a-time generation on the tiny random VLM (CPU).

    python bench/zeroshot_generation.py [--smoke] [--repeats 5] [--memes 256] [--batch-size 16] [--max-new-tokens 8] [--num-workers 1]

`crossmod.prompting.zeroshot.answer_all` (the real path: preprocessor, processor collate, greedy `generate`, answer
parsing, P(hate) from the first step) answers the same memes with `batch_size=16` and `batch_size=1`,
interleaved per round. A random model stops at EOS after a different number of tokens per meme, which
would make the comparison depend on luck: the model's generation config gets
`min_new_tokens = max_new_tokens`, so every meme generates exactly `max_new_tokens` tokens in both
variants (checked on every `generate` call). The model is `model=vlm model.fusion.mode=verbalizer
model.fusion.lora=null model.preprocessor.image_size=56` (the tiny Qwen2-VL built on first use). The memes are
prepared (chat template, image resize, the processor's batch) in `--num-workers` loader workers, as
`zeroshot.num_workers` has zero-shot runs do, so the model does not wait for that work between generations. The
frozen tower's features go to a vision cache of the run's own (`model.fusion.vision_cache=auto`, as zero-shot runs use
it), filled by the warm-up: every measured variant reads it, and no earlier run's cache does.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Result, build_model, interleave, parser, raw_dict, repeats, stats, synthetic_samples  # noqa: E402

NAME = "zeroshot_generation"
TARGET = 4.0


class GenerateRecorder:
    """Wraps the base model's `generate` (on this instance only): time spent and new tokens per call."""

    def __init__(self, base) -> None:
        self.original, self.calls = base.generate, []
        base.generate = self

    def __call__(self, **kwargs):
        start = time.perf_counter()
        out = self.original(**kwargs)
        self.calls.append((time.perf_counter() - start, out.sequences.shape[1] - kwargs["input_ids"].shape[1]))
        return out


def main() -> None:
    p = parser(__doc__.splitlines()[0], default_repeats=5)
    p.add_argument("--memes", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (same for both variants)")
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"), help="where the model generates (bench/gpu_proof.py: gpu)")
    p.add_argument(
        "--num-workers", type=int, default=1, help="loader workers preparing the batches, as zeroshot.num_workers (same for both variants)"
    )
    args = p.parse_args()
    smoke = args.smoke
    memes = args.memes or (4 if smoke else 256)  # a prompt over a dataset: the loader workers start once per call
    batch_size = args.batch_size or (4 if smoke else 16)
    new_tokens = args.max_new_tokens or (2 if smoke else 8)

    import torch

    from crossmod.inference.scoring import single_device_trainer
    from crossmod.prompting.zeroshot import answer_all

    torch.set_num_threads(args.threads)
    # the run's own vision cache: filled by the warm-up, as a zero-shot run's first prompt fills it
    cache = tempfile.TemporaryDirectory(prefix="crossmod-zeroshot-bench-")
    overrides = ["model=vlm", "model.fusion.mode=verbalizer", "model.fusion.lora=null", "model.preprocessor.image_size=56"]
    model, _ = build_model([*overrides, f"model.fusion.vision_cache_dir={cache.name}"])
    model.eval()
    base = model.backbone.base_model()
    base.generation_config.min_new_tokens = new_tokens  # every meme generates exactly max_new_tokens tokens
    recorder = GenerateRecorder(base)
    records = [raw_dict(s) for s in synthetic_samples(memes, image_size=128)]
    trainer = single_device_trainer(args.accelerator)  # the loop zeroshot.py runs: Lightning's predict loop

    result = Result(
        NAME,
        f"Zero-shot answers/s: answer_all with batch {batch_size} against batch 1 (tiny random Qwen2-VL, {args.accelerator.upper()})",
        args,
        {
            "model": " ".join(overrides),
            "model_parameters": sum(p.numel() for p in model.parameters()),
            "memes": memes,
            "batch_size": batch_size,
            "max_new_tokens": new_tokens,
            "min_new_tokens": new_tokens,
            "prompt_index": 0,
            "torch_threads": args.threads,
            "num_workers": args.num_workers,
        },
    )

    def run(size: int, workers: int = args.num_workers) -> dict[str, float]:
        recorder.calls.clear()
        start = time.perf_counter()
        rows = answer_all(trainer, model, records, 0, size, new_tokens, workers)
        elapsed = time.perf_counter() - start
        assert len(rows) == memes
        lengths = {n for _, n in recorder.calls}
        if lengths != {new_tokens}:
            raise AssertionError(f"generated {sorted(lengths)} new tokens per call, expected exactly {new_tokens}")
        return {"memes_per_s": memes / elapsed, "generate_s": sum(t for t, _ in recorder.calls), "total_s": elapsed}

    run(batch_size)  # warm-up: first-call allocations and lazy initialisation
    variants = {
        f"batch{batch_size}": lambda: run(batch_size),
        "batch1": lambda: run(1),
        f"batch{batch_size}_in_main_process": lambda: run(batch_size, 0),
    }
    measured = interleave(variants, repeats(args))
    for name, runs in measured.items():
        result.variant(
            name,
            "memes/s",
            [r["memes_per_s"] for r in runs],
            generate_only_memes_per_s=stats([memes / r["generate_s"] for r in runs]),
            generate_share=round(statistics.median(r["generate_s"] / r["total_s"] for r in runs), 3),
        )
    batched, single = measured[f"batch{batch_size}"], measured["batch1"]
    ratio = result.paired(
        f"batch{batch_size}/batch1",
        [r["memes_per_s"] for r in batched],
        [r["memes_per_s"] for r in single],
        "median over rounds of (memes/s of answer_all at the batch size / at batch 1, same round; same memes, same tokens)",
    )
    result.paired(
        f"batch{batch_size}/batch1 (generate only)",
        [memes / r["generate_s"] for r in batched],
        [memes / r["generate_s"] for r in single],
        "the same ratio counting only the time inside generate()",
    )
    result.row(
        f"{memes} memes, {new_tokens} new tokens: batch {batch_size} vs batch 1",
        f"batch{batch_size}",
        "batch1",
        f"batch{batch_size}/batch1",
        f"batch{batch_size} >= {TARGET}x batch1",
        unit="memes/s",
    )
    workers_ratio = result.paired(
        f"batch{batch_size}/batch{batch_size}_in_main_process",
        [r["memes_per_s"] for r in batched],
        [r["memes_per_s"] for r in measured[f"batch{batch_size}_in_main_process"]],
        f"memes/s with the batches prepared in {args.num_workers} loader worker(s) / in the main process, same round",
    )
    result.row(
        f"batch {batch_size}: batches prepared in loader workers vs in the main process",
        f"batch{batch_size}",
        f"batch{batch_size}_in_main_process",
        f"batch{batch_size}/batch{batch_size}_in_main_process",
        None,
        unit="memes/s",
    )
    generate_ratio = result.payload["ratios"][f"batch{batch_size}/batch1 (generate only)"]["value"]
    share = result.payload["variants"][f"batch{batch_size}"]["generate_share"]
    result.finding(
        f"Batch {batch_size} answers {ratio:.2f}× as many memes per second as batch 1 (inside `generate()` alone {generate_ratio:.2f}×); "
        f"at batch {batch_size}, generation is {100 * share:.0f} % of `answer_all`'s time (the rest is spent outside `generate()`). "
        "Preparing the batches in "
        f"{args.num_workers} loader worker(s) instead of the main process: {workers_ratio:.2f}× (two cores shared by the model and the worker)."
    )
    result.target(
        f"batch{batch_size} >= {TARGET}x batch1", ratio, ">=", TARGET, f"batched generation at least {TARGET}x one meme at a time (CPU)"
    )
    result.write()


if __name__ == "__main__":
    main()

"""Shard conversion: memes/s written by `write_shards`, with and without image validation.

    python bench/conversion.py [--smoke] [--repeats 3] [--sizes 128 512]

The memes are generated first (the generator's drawing is not timed), then converted by the real shard
writer (tar shards, SHA-256 of every shard, manifest, atomic rename) into a fresh directory per run.
Variants, interleaved per round, on the same memes:

* `no_image_check`: labels validated, the image bytes not looked at
* `magic_bytes`: `Sample.validate` as `write_shards` runs it (labels + JPEG/PNG/WebP signature sniff);
  what the synthetic source's conversion does
* `pil_decode`: every image first through `crossmod.data.sources.images.check_image` (PIL `verify()` and a
  full `load()`, decompression-bomb limit on), as the real-dataset converters' `load_image` does

Sizes: 128 px (what `data=synthetic` stores) and 512 px (the study's meme size; real memes are larger
still, so their full decode costs more).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Result, interleave, parser, repeats, synthetic_samples  # noqa: E402

NAME = "conversion"


def convert(samples: list, variant: str, per_shard: int) -> float:
    """Memes/s of one conversion of `samples` into a fresh shard directory."""
    from crossmod.data.sample import Sample
    from crossmod.data.shards import write_shards
    from crossmod.data.sources.images import check_image

    class NoImageCheck(Sample):
        def validate(self, heads) -> None:
            image, self.image = self.image, None
            try:
                super().validate(heads)
            finally:
                self.image = image

    heads = {name: {"kind": "binary"} for name in samples[0].labels}
    if variant == "no_image_check":
        samples = [NoImageCheck(**{f: getattr(s, f) for f in Sample.__dataclass_fields__}) for s in samples]  # built before timing

    def records():
        for sample in samples:
            if variant == "pil_decode":
                problem = check_image(sample.image)
                if problem:
                    raise ValueError(f"{sample.id}: {problem}")
            yield sample

    tmp = Path(tempfile.mkdtemp(prefix="crossmod-bench-convert-"))
    try:
        start = time.perf_counter()
        manifest = write_shards(
            records(), tmp / "out", dataset="synthetic", heads=heads, params={"bench": len(samples)}, maxcount=per_shard
        )
        elapsed = time.perf_counter() - start
        assert manifest["samples_written"] == len(samples)
        return len(samples) / elapsed
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = parser(__doc__.splitlines()[0], default_repeats=5)
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="image sizes in px")
    p.add_argument("--memes", type=int, nargs="+", default=None, help="memes per size (one number per size)")
    p.add_argument("--samples-per-shard", type=int, default=500)
    args = p.parse_args()
    sizes = args.sizes or ([128] if args.smoke else [128, 512])
    counts = args.memes or ([24] if args.smoke else [3000, 600][: len(sizes)] + [600] * max(0, len(sizes) - 2))
    variants = ("no_image_check", "magic_bytes", "pil_decode")

    result = Result(
        NAME,
        "Memes/s written by the shard converter without image checks, with the magic-byte check, and with a full PIL decode",
        args,
        {
            "sizes_px": sizes,
            "memes": dict(zip(map(str, sizes), counts)),
            "samples_per_shard": args.samples_per_shard,
            "image_format": "JPEG q90",
        },
    )
    for size, count in zip(sizes, counts):
        samples = synthetic_samples(count, image_size=size)
        image_bytes = statistics.median(len(s.image) for s in samples)
        print(f"[{NAME}] {count} memes of {size} px (median {image_bytes} bytes)", flush=True)
        measured = interleave({v: (lambda v=v, s=samples: convert(s, v, args.samples_per_shard)) for v in variants}, repeats(args))
        for name, values in measured.items():
            result.variant(f"{name}/{size}px", "memes/s", values, median_image_bytes=image_bytes)
        medians = {name: statistics.median(values) for name, values in measured.items()}
        result.paired(
            f"pil_decode/magic_bytes {size}px",
            measured["pil_decode"],
            measured["magic_bytes"],
            "median over rounds of (memes/s with full PIL decode / with the magic-byte check, same round)",
        )
        result.paired(
            f"magic_bytes/no_image_check {size}px",
            measured["magic_bytes"],
            measured["no_image_check"],
            "median over rounds of (memes/s with the magic-byte check / without any image check, same round)",
        )
        result.row(
            f"{size} px: `pil_decode` vs `magic_bytes`",
            f"pil_decode/{size}px",
            f"magic_bytes/{size}px",
            f"pil_decode/magic_bytes {size}px",
            unit="memes/s",
        )
        result.row(
            f"{size} px: `magic_bytes` vs `no_image_check`",
            f"magic_bytes/{size}px",
            f"no_image_check/{size}px",
            f"magic_bytes/no_image_check {size}px",
            unit="memes/s",
        )
        per_meme_ms = 1000 * (1 / medians["pil_decode"] - 1 / medians["magic_bytes"])
        result.payload.setdefault("pil_decode_cost_ms_per_meme", {})[f"{size}px"] = round(per_meme_ms, 3)
    costs = result.payload["pil_decode_cost_ms_per_meme"]
    result.finding(
        "Full PIL validation (verify + decode) costs "
        + ", ".join(
            f"{costs[f'{size}px']:.2f} ms per meme at {size} px ({result.payload['ratios'][f'pil_decode/magic_bytes {size}px']['value']:.2f}× the "
            f"magic-byte conversion's memes/s)"
            for size in sizes
        )
        + "; the magic-byte check (a signature comparison) runs at "
        + ", ".join(f"{result.payload['ratios'][f'magic_bytes/no_image_check {size}px']['value']:.2f}×" for size in sizes)
        + " the speed of no image check at all, a difference within the rounds' noise."
    )
    result.note(
        "No target is set for conversion; the numbers size how long converting a real dataset takes and what full image validation costs."
    )
    result.write()


if __name__ == "__main__":
    main()

"""Render the benchmark table of docs/performance.md from the committed results in `bench/results/*.json`.

    python scripts/bench_table.py            (rewrite the table between the bench-table markers)
    python scripts/bench_table.py --check    (exit 1 when the page differs from the rendering)

The numbers are never typed: every cell comes from a result file written by a script in `bench/`
(`make bench` runs them all, then this script). Each row names the variant and its baseline, their
medians over the repetitions with min–max, the ratio of the medians and the target.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "docs" / "performance.md"  # the page that holds the table
START, END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"
ORDER = (
    "training_overhead",
    "shared_cores",
    "data_loading",
    "conversion",
    "zeroshot_generation",
    "ocr",
    "vlm_training",
    "vision_cache",
    "vlm_flops",
    "memory_plan",
    "cli_startup",
    "serve",
)
ON_ITS_OWN = ("text_recipe",)  # run by hand (10+ minutes: not in make bench), its committed result in the table too
TITLES = {
    "text_recipe": "Text recipe cross-validation",
    "training_overhead": "Training overhead",
    "shared_cores": "Trainings sharing a machine",
    "data_loading": "Data loading",
    "conversion": "Shard conversion",
    "zeroshot_generation": "Zero-shot generation",
    "ocr": "OCR",
    "vlm_training": "VLM LoRA training",
    "vision_cache": "Vision feature cache",
    "vlm_flops": "VLM FLOPs (counted)",
    "memory_plan": "Memory plan (computed)",
    "cli_startup": "Command start-up",
    "serve": "Serving",
}


# Records in bench/results/ that are not benchmark rounds: the GPU proof's figures and wheelhouse reports.
OTHER_RECORDS = ("gpu_proof*.json", "wheelhouse_*.json")


def is_other_record(path: Path) -> bool:
    return any(path.match(pattern) for pattern in OTHER_RECORDS)


def load_results(directory: Path = RESULTS) -> list[dict]:
    """Every committed benchmark result; a file that is neither a benchmark nor a named other record fails on its
    missing "benchmark" key rather than being skipped."""
    paths = [path for path in sorted(directory.glob("*.json")) if not is_other_record(path)]
    results = [json.loads(path.read_text()) for path in paths]
    results = [r for r in results if not r.get("smoke")]
    return sorted(
        results,
        key=lambda r: (
            (ORDER + ON_ITS_OWN).index(r["benchmark"]) if r["benchmark"] in ORDER + ON_ITS_OWN else len(ORDER) + len(ON_ITS_OWN),
            r["benchmark"],
        ),
    )


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cell(variant: dict, scale: float, unit: str) -> str:
    median, low, high = (variant[k] * scale for k in ("median", "min", "max"))
    return f"{_number(median)} {unit} ({_number(low)}–{_number(high)})"


def _ratio(ratio: dict, percent: bool) -> str:
    show = (lambda x: f"{100 * x:.1f} %") if percent else (lambda x: f"{x:.2f}×")
    text = show(ratio["value"])
    return f"{text} ({show(ratio['min'])}–{show(ratio['max'])})" if "min" in ratio and ratio["min"] != ratio["max"] else text


def _target(result: dict, name: str | None) -> tuple[str, str]:
    if name is None:
        return "—", "—"
    target = next(t for t in result["targets"] if t["name"] == name)
    threshold = target["threshold"]
    shown = f"{100 * threshold:g} %" if threshold < 1 and not target.get("times") else f"{threshold:g}×"
    return f"{'≤' if target['op'] == '<=' else '≥'} {shown}", "yes" if target["met"] else "**no**"


def render(results: list[dict]) -> str:
    if not results:
        return "No benchmark results yet: run `make bench`."
    kinds = sorted({r["machine"]["kind"] for r in results})
    loads = [
        x for r in results for x in (r.get("load_average_start") or [None])[:1] + (r.get("load_average_end") or [None])[:1] if x is not None
    ]
    dates = sorted({r["date"][:10] for r in results})

    def versions(package: str) -> str:  # every version the results were measured with (scripts rerun on their own)
        return " / ".join(sorted({str(r["versions"].get(package)) for r in results}))

    lines = [
        f"Measured by `make bench` on {', '.join(kinds)}, {' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)}; "
        f"torch {versions('torch')}, lightning {versions('lightning')}, transformers {versions('transformers')}, "
        f"webdataset {versions('webdataset')}. "
        f"Other jobs shared the machine (1-minute load average {min(loads):.1f}–{max(loads):.1f} at the scripts' starts and ends), "
        "so every comparison runs its variants interleaved in one process; variant and baseline are medians (min–max) over the "
        "rounds (×n), the ratio is the median (min–max) over rounds of variant / baseline of the same round. Stored in `bench/results/*.json`, rendered by `scripts/bench_table.py`.",
        "",
        "| benchmark | comparison | variant | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        title = f"{TITLES.get(result['benchmark'], result['benchmark'])} (×{result['repetitions']})"
        for row in result["rows"]:
            variants = result["variants"]
            variant = _cell(variants[row["variant"]], row["scale"], row["unit"])
            baseline = _cell(variants[row["baseline"]], row["scale"], row["unit"]) if row["baseline"] else "—"
            ratio = result["ratios"][row["ratio"]]
            ratio_text = _ratio(ratio, row["unit"] == "%")
            target, met = _target(result, row["target"])
            lines.append(f"| {title} | {row['label']} | {variant} | {baseline} | {ratio_text} | {target} | {met} |")
    findings = [(TITLES.get(r["benchmark"], r["benchmark"]), text) for r in results for text in r.get("findings", [])]
    if findings:
        lines.append("")
        lines += [f"- **{title}**: {text}" for title, text in findings]
    return "\n".join(lines)


def readme_block(text: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"{README.name} has no {START} … {END} markers")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def update_readme(rendered: str, readme: Path = README) -> bool:
    """Rewrite the block between the markers; return whether the file changed."""
    text = readme.read_text()
    readme_block(text)
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{START}\n{rendered}\n{END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the README table is stale")
    args = parser.parse_args()
    rendered = render(load_results())
    if args.check:
        if readme_block(README.read_text()) != rendered.strip():
            print(
                "docs/performance.md benchmark table differs from bench/results/*.json: run python scripts/bench_table.py", file=sys.stderr
            )
            raise SystemExit(1)
        print("docs/performance.md benchmark table is up to date")
        return
    update_readme(rendered)
    print(rendered)


if __name__ == "__main__":
    main()

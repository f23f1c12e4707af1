"""The memory plan as markdown: the tables docs/performance.md shows between its markers, rendered from
`bench/results/memory_plan.json` (written by `bench/memory_plan.py`) so that no figure there is typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "performance.md"
START, END = "<!-- memory-plan:start -->", "<!-- memory-plan:end -->"


def _gib(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def markdown_table(rows: list[dict[str, Any]], usable_gib: float, batch: int) -> str:
    """The plan as a markdown table (a row per model × GPUs × strategy × checkpointing)."""
    lines = [
        f"| model | GPUs | strategy | `strategy=` | ckpt | states, DeepSpeed est. (GiB) | states, LoRA (GiB) | activations ×{batch} (GiB) | total (GiB) | fits {usable_gib:g} GiB | host/node, LoRA (GiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        host = _gib(row["lora_host_per_node_gib"]) if row["lora_host_per_node_gib"] else "—"
        lines.append(
            f"| {row['model'].split('/')[-1]} | {row['gpus']} | {row['strategy']} | `{row['config']}` | {'on' if row['checkpointing'] else 'off'} "
            f"| {_gib(row['deepspeed_states_gib'])} | {_gib(row['lora_states_gib'])} | {_gib(row['activations_gib'])} | {_gib(row['total_gib'])} "
            f"| {'yes' if row['fits'] else '**no**'} | {host} |"
        )
    return "\n".join(lines)


def parameter_table(models: list[dict[str, Any]]) -> str:
    lines = [
        "| model | parameters | LoRA q,v r 8 | heads | largest layer (DeepSpeed) | below persistence threshold |",
        "|---|---|---|---|---|---|",
    ]
    for m in models:
        lines.append(
            f"| {m['name'].split('/')[-1]} | {m['base']:,} | {m['lora']:,} | {m['heads']:,} | {m['largest_layer']:,} | {m['persistent']:,} |"
        )
    return "\n".join(lines)


def activation_table(models: list[dict[str, Any]]) -> str:
    lines = [
        "| model | regime | held, no ckpt (MB) | held, ckpt (MB) | one decoder layer (MB) |",
        "|---|---|---|---|---|",
    ]
    for m in models:
        for regime, a in m["activations_per_meme"].items():
            lines.append(
                f"| {m['name'].split('/')[-1]} | {regime} | {a['held_bytes'] / 1e6:,.0f} | {a['held_checkpointing_bytes'] / 1e6:,.0f} "
                f"| {a['decoder_layer_bytes'] / 1e6:,.0f} |"
            )
    return "\n".join(lines)


def docs_block(result: dict[str, Any]) -> str:
    """What docs/performance.md shows between its markers: rendered from the result file, never typed."""
    plan_ = result["plan"]
    usable = plan_["capacity_gib"] - plan_["headroom_gib"]
    validation = [
        "| size | family | tokens | patches | regime | ckpt | measured (bytes) | formula (bytes) | formula / measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in result["validation"]:
        validation.append(
            f"| {v['size']} | {v['family']} | {v['tokens']} | {v['patches']} | {v['regime']} | {'on' if v['checkpointing'] else 'off'} "
            f"| {v['measured_bytes']:,} | {v['formula_bytes']:,} | {v['formula_over_measured']:.4f} |"
        )
    return "\n\n".join(
        [
            f"Written by `python bench/memory_plan.py` on {result['date'][:10]} from `bench/results/memory_plan.json`. "
            f"{plan_['tokens_per_meme']} tokens per meme ({plan_['image_tokens']} image tokens + 2 + {plan_['text_tokens']} text tokens), "
            f"{plan_['batch_per_gpu']} memes per GPU, {plan_['capacity_gib']:g} GiB per GPU less {plan_['headroom_gib']:g} GiB headroom.",
            "**Parameters** (counted on the published configs built on the meta device):\n\n" + parameter_table(plan_["models"]),
            "**Activation formula vs saved-tensor bytes measured on CPU** (small random models, one meme):\n\n" + "\n".join(validation),
            "**Activations per meme** (formula at the published sizes):\n\n" + activation_table(plan_["models"]),
            "**Plan** (per GPU):\n\n" + markdown_table(plan_["rows"], usable, plan_["batch_per_gpu"]),
        ]
    )


def update_docs(block: str, path: Path = DOCS, start: str = START, end: str = END) -> None:
    """Replace what stands between the markers (another benchmark's table gives its own markers)."""
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path} has no {start} … {end} markers")
    head, rest = text.split(start, 1)
    path.write_text(f"{head}{start}\n{block}\n{end}{rest.split(end, 1)[1]}")

"""FLOPs per meme of crossmod's Qwen2-VL / Qwen2.5-VL LoRA classifier, counted term by term from the config.

Convention (what a training step's model FLOPs are here):
- A matmul of (m×k)·(k×n) is 2·m·k·n FLOPs (a multiply and an add per MAC), as FlopCounterMode counts it.
  Linear biases, convolution bias, softmax, RMSNorm/LayerNorm, rotary embeddings (M-RoPE and the vision
  tower's 2-D rope), activations (SiLU, GELU, QuickGELU), the SwiGLU product, residual adds, LoRA dropout
  and scaling, the embedding lookup and the loss are elementwise or gathers and are NOT counted.
- Forward: every matmul of the vision tower (patch embedding as a Conv3d, qkv and proj, QKᵀ and ·V, MLP),
  the merger MLP, the language model (q/k/v/o with grouped-query k/v widths, QKᵀ and ·V over the whole
  sequence, SwiGLU gate/up/down), the LoRA adapters (A then B), and the readout crossmod computes:
  `head` mode runs no LM head at all (the last token's hidden state feeds the shared head layer,
  hidden×outputs), `verbalizer` mode applies the LM head to the last token only (hidden×vocab).
- The attention square is counted whole, S² per head (no halving for the causal mask): what eager and
  SDPA's math compute, and what FlopCounterMode counts for fused kernels too.
- Backward with a frozen base: only what autograd runs. A frozen matmul whose input needs a gradient costs
  its forward again (the activation gradient; the weight gradient is skipped); one whose input needs none
  costs nothing. So the frozen vision tower and merger have no backward at all (pixels and frozen weights
  need no gradient), nor do the projections of the first layer that only see the frozen embeddings.
  LoRA matrices cost 2× their forward (weight gradient plus the gradient of their input, except A's input
  where that input needs none). The trainable head layer likewise.
- Not model FLOPs, reported beside them: what a fused attention backward (SDPA's CPU/CUDA kernels,
  flash-attention 2) does on top: it recomputes QKᵀ and returns gradients for q, k and v whether or not
  they are needed (`attention_kernel_extra`). Model FLOPs + that extra is what FlopCounterMode reports
  for `attn_implementation="sdpa"`; MFU uses model FLOPs only. Gradient-checkpointing recomputation is
  likewise reported apart (`recompute`) and excluded from MFU (it would be hardware FLOPs utilisation).
- NOT the "6·N·tokens" rule: that assumes every parameter of a dense model is trained (2N forward, 4N
  backward) on every token. Here the base is frozen (backward ≈ 1× forward, not 2×), the vision tower runs
  on patches (4× the image tokens) and has no backward, and the attention square is included. The rule's
  figure is printed for comparison only.

Counts are per meme with no padding (the useful work; padding waste lowers MFU, as it should).

    python bench/vlm_flops.py [--config qwen2-vl-7b] [--image-size 512] [--text-tokens 64]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/vlm_flops.py` puts bench/ first on the path, not the checkout
    sys.path.insert(0, str(ROOT))

from bench.vlm_configs import PUBLISHED, named_config  # noqa: E402

LLM_LINEAR = ("q", "k", "v", "o", "gate", "up", "down")
LORA_PRESETS = {"qv": ("q", "v"), "all_linear": LLM_LINEAR}  # crossmod.models.vlm.families' presets, by projection
COMPONENTS = ("vision", "merger", "llm", "lora", "readout")


@dataclass(frozen=True)
class Term:
    """One counted piece of work: FLOPs of its forward and of its backward (0 when autograd skips it)."""

    component: str  # vision | merger | llm | lora | readout
    name: str
    forward: int
    backward: int = 0


@dataclass
class FlopCount:
    """FLOPs per meme of one configuration, by term, with the sizes that produced them."""

    config_name: str
    image_height: int
    image_width: int
    patches: int
    image_tokens: int
    text_tokens: int
    readout: str
    lora_targets: tuple[str, ...]
    lora_rank: int
    terms: list[Term] = field(default_factory=list)
    attention_kernel_extra: int = 0  # fused attention backward beyond model FLOPs (QKᵀ recompute, unneeded dK/dV)
    recompute: int = 0  # gradient checkpointing's second forward of the language model

    @property
    def sequence(self) -> int:
        return self.image_tokens + self.text_tokens

    @property
    def forward(self) -> int:
        return sum(t.forward for t in self.terms)

    @property
    def backward(self) -> int:
        return sum(t.backward for t in self.terms)

    @property
    def train(self) -> int:
        """Model FLOPs of one training step per meme (forward + backward): what MFU divides by time."""
        return self.forward + self.backward

    def by_component(self) -> dict[str, dict[str, int]]:
        out = {c: {"forward": 0, "backward": 0} for c in COMPONENTS}
        for t in self.terms:
            out[t.component]["forward"] += t.forward
            out[t.component]["backward"] += t.backward
        return out

    def as_dict(self) -> dict[str, Any]:
        totals = {"sequence_tokens": self.sequence, "forward": self.forward, "backward": self.backward, "train": self.train}
        return {**asdict(self), **totals, "by_component": self.by_component()}

    def table(self) -> str:
        """The breakdown as a text table (GFLOPs per meme, share of the training step)."""
        rows = [f"{'component':<9} {'term':<54} {'forward':>10} {'backward':>10} {'train':>10} {'share':>6}"]
        for t in self.terms:
            total = t.forward + t.backward
            rows.append(f"{t.component:<9} {t.name:<54} {_g(t.forward)} {_g(t.backward)} {_g(total)} {100 * total / self.train:5.1f}%")
        rows.append("-" * len(rows[0]))
        for component, parts in self.by_component().items():
            total = parts["forward"] + parts["backward"]
            rows.append(
                f"{component:<9} {'(all)':<54} {_g(parts['forward'])} {_g(parts['backward'])} {_g(total)} {100 * total / self.train:5.1f}%"
            )
        rows.append(
            f"{'total':<9} {'model FLOPs per meme (MFU numerator)':<54} {_g(self.forward)} {_g(self.backward)} {_g(self.train)} 100.0%"
        )
        rows.append(f"{'':<9} {'+ fused attention backward extra (not MFU)':<54} {'':>10} {_g(self.attention_kernel_extra)}")
        if self.recompute:
            rows.append(f"{'':<9} {'+ gradient-checkpointing recompute (not MFU)':<54} {'':>10} {_g(self.recompute)}")
        return "\n".join(rows) + "\n(GFLOPs per meme)"


def _g(flops: int) -> str:
    return f"{flops / 1e9:10.2f}"


def image_grid(
    config: Any, image_size: int | tuple[int, int], min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """(height, width) in pixels after the Qwen image processor's resize (multiples of patch × merge).

    Defaults are the processor's own bounds (56·56 to 28·28·1280 pixels); crossmod's `model.preprocessor`
    passes its `min_pixels`/`max_pixels` when set.
    """
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    vision = config.vision_config
    factor = vision.patch_size * vision.spatial_merge_size
    bounds = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v is not None}
    return smart_resize(height, width, factor=factor, **bounds)


def lora_targets(targets: str | Iterable[str]) -> tuple[str, ...]:
    """A preset name (`qv`, `all_linear`) or projection names (q, k, v, o, gate, up, down)."""
    names = LORA_PRESETS[targets] if isinstance(targets, str) and targets in LORA_PRESETS else tuple(targets)
    unknown = [n for n in names if n not in LLM_LINEAR]
    if unknown:
        raise ValueError(f"LoRA targets {unknown} are not language-model projections {LLM_LINEAR} (vision LoRA is not counted here)")
    return tuple(n for n in LLM_LINEAR if n in names)


def count_flops(
    config: Any,
    image_size: int | tuple[int, int] = 512,
    text_tokens: int = 64,
    lora: str | Iterable[str] = "qv",
    lora_rank: int = 8,
    readout: str = "head",
    head_outputs: int = 5,
    gradient_checkpointing: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> FlopCount:
    """FLOPs per meme for one training step of the LoRA classifier (convention: the module docstring).

    `config`: a Qwen2VLConfig / Qwen2_5_VLConfig or a name of `bench.vlm_configs.PUBLISHED`.
    `text_tokens`: every token of the sequence that is not an image token (chat template, prompt, caption,
    vision start/end). `head_outputs`: logits of the shared head layer (5 culture heads by default).
    `gradient_checkpointing`: as crossmod's `model.fusion.gradient_checkpointing=true` runs it: every decoder
    layer is recomputed in backward up to the last tensor its backward needs (non-reentrant checkpointing stops
    there, so the closing down projection is skipped), reported as `recompute`, outside model FLOPs. crossmod
    removes the input-embedding hooks that would make the embeddings (and in Transformers 5 the vision tower's
    patch embedding) require grad, so what back-propagates is unchanged (the agreement check runs that path).
    """
    name = config if isinstance(config, str) else getattr(config, "_name_or_path", "") or config.model_type
    if isinstance(config, str):
        config = named_config(config)
    if readout not in ("head", "verbalizer"):
        raise ValueError(f"readout must be 'head' or 'verbalizer', got {readout!r}")
    if text_tokens < 1:
        raise ValueError(f"text_tokens must be at least 1 (the last token is read out), got {text_tokens}")
    height, width = image_grid(config, image_size, min_pixels, max_pixels)
    vision = config.vision_config
    grid_h, grid_w = height // vision.patch_size, width // vision.patch_size
    patches, image_tokens = grid_h * grid_w, grid_h * grid_w // vision.spatial_merge_size**2
    targets = lora_targets(lora)
    count = FlopCount(name, height, width, patches, image_tokens, text_tokens, readout, targets, lora_rank)
    llm_terms, count.attention_kernel_extra, count.recompute = _language_model_terms(
        config.get_text_config(), image_tokens + text_tokens, targets, lora_rank, gradient_checkpointing
    )
    count.terms = _vision_terms(config, grid_h, grid_w) + llm_terms + [_readout_term(config.get_text_config(), readout, head_outputs)]
    return count


def _readout_term(text: Any, readout: str, head_outputs: int) -> Term:
    if readout == "head":  # the shared head layer (trainable): weight gradient and the gradient of its input
        macs = text.hidden_size * head_outputs
        return Term("readout", f"head layer, last token ({head_outputs} outputs)", 2 * macs, 4 * macs)
    macs = text.hidden_size * text.vocab_size  # the frozen LM head on the last token only: its input gradient
    return Term("readout", "LM head, last token only (verbalizer)", 2 * macs, 2 * macs)


def _vision_terms(config: Any, grid_h: int, grid_w: int) -> list[Term]:
    """The frozen vision tower and merger: forward only (pixels and frozen weights need no gradient)."""
    v = config.vision_config
    qwen25 = config.model_type == "qwen2_5_vl"
    width = v.hidden_size if qwen25 else v.embed_dim
    merged_out = v.out_hidden_size if qwen25 else v.hidden_size
    n = grid_h * grid_w
    patch_in = v.in_channels * v.temporal_patch_size * v.patch_size**2
    full_square = n * n  # Σ over attention segments of length²: one image is one segment
    if qwen25:
        window_square = _window_square(grid_h, grid_w, v.window_size // v.spatial_merge_size // v.patch_size, v.spatial_merge_size)
        full_blocks = sum(1 for i in range(v.depth) if i in v.fullatt_block_indexes)
        square = full_blocks * full_square + (v.depth - full_blocks) * window_square
        mlp = 3 * n * width * v.intermediate_size
        mlp_name, attention_name = (
            f"MLP SwiGLU 3×{width}×{v.intermediate_size}",
            f"({full_blocks} full blocks, {v.depth - full_blocks} windowed)",
        )
    else:
        square = v.depth * full_square
        mlp = 2 * n * width * int(width * v.mlp_ratio)
        mlp_name, attention_name = f"MLP fc1/fc2 {width}×{int(width * v.mlp_ratio)}", "(whole image)"
    group, merged = width * v.spatial_merge_size**2, n // v.spatial_merge_size**2
    return [
        Term("vision", f"patch embed Conv3d {patch_in}→{width} ({n} patches)", 2 * n * patch_in * width),
        Term("vision", f"attention qkv + proj ({v.depth} blocks)", 2 * v.depth * n * width * 4 * width),
        Term("vision", f"attention QKᵀ, ·V {attention_name}", 2 * 2 * square * width),
        Term("vision", f"{mlp_name} ({v.depth} blocks)", 2 * v.depth * mlp),
        Term("merger", f"merger MLP {group}→{group}→{merged_out} ({merged} tokens)", 2 * merged * (group * group + group * merged_out)),
    ]


def _window_square(grid_h: int, grid_w: int, window: int, merge: int) -> int:
    """Σ length² over Qwen2.5-VL's attention windows: `window`×`window` merged tokens, the last row/column
    of windows cut short (as transformers.vision_utils.get_vision_window_index builds them)."""
    rows = _window_sides(grid_h // merge, window)
    cols = _window_sides(grid_w // merge, window)
    return merge**4 * sum(r * r for r in rows) * sum(c * c for c in cols)


def _window_sides(tokens: int, window: int) -> list[int]:
    return [window] * (tokens // window) + ([tokens % window] if tokens % window else [])


def _language_model_terms(
    text: Any, seq: int, targets: tuple[str, ...], rank: int, gradient_checkpointing: bool
) -> tuple[list[Term], int, int]:
    """Decoder layers: base and adapter terms, fused-attention extra, checkpointing recompute.

    Which gradients autograd computes is followed tensor by tensor through each layer: the stream entering
    layer 0 needs none (frozen embeddings; image features from a frozen tower).
    """
    d, heads, kv_heads = text.hidden_size, text.num_attention_heads, text.num_key_value_heads
    kv, inner = kv_heads * (d // heads), text.intermediate_size
    shapes = {"q": (d, d), "k": (d, kv), "v": (d, kv), "o": (d, d), "gate": (d, inner), "up": (d, inner), "down": (inner, d)}
    base = {"projections": [0, 0], "attention": [0, 0], "mlp": [0, 0]}
    adapters: dict[str, list[int]] = {t: [0, 0] for t in targets}
    square = seq * seq * d  # MACs of QKᵀ (all query heads; grouped k/v are repeated, not recomputed) and of ·V
    extra = 0
    stream = False

    def linear(name: str, input_grad: bool, bucket: str) -> bool:
        """Count one projection (and its adapter); return whether its output needs a gradient."""
        a, b = shapes[name]
        base[bucket][0] += 2 * seq * a * b
        base[bucket][1] += 2 * seq * a * b if input_grad else 0
        if name not in targets:
            return input_grad
        adapters[name][0] += 2 * seq * rank * (a + b)
        # B: weight gradient + gradient of its input (A's output); A: weight gradient (+ its input's if needed)
        adapters[name][1] += 2 * (2 * seq * rank * b + seq * a * rank + (seq * a * rank if input_grad else 0))
        return True

    for _ in range(text.num_hidden_layers):
        q, k, v = (linear(p, stream, "projections") for p in ("q", "k", "v"))
        probabilities = q or k
        base["attention"][0] += 2 * 2 * square
        base["attention"][1] += 2 * square * (q + k + probabilities + v)
        if q or k or v:  # a fused kernel's backward: QKᵀ again, then dQ, dK, dV and dP, needed or not
            extra += 2 * square * (5 - (q + k + probabilities + v))
        attention_out = probabilities or v
        hidden = linear("o", attention_out, "projections") or stream  # the residual joins the stream
        gate, up = linear("gate", hidden, "mlp"), linear("up", hidden, "mlp")
        down = linear("down", gate or up, "mlp")  # called before `or`: every layer's down projection is counted
        stream = hidden or down
    terms = [
        Term("llm", f"attention q/k/v/o ({heads} heads, {kv_heads} k/v heads)", *base["projections"]),
        Term("llm", f"attention QKᵀ, ·V ({seq}² per head, causal not halved)", *base["attention"]),
        Term("llm", f"MLP SwiGLU 3×{d}×{inner}", *base["mlp"]),
        *(Term("lora", f"LoRA {name}_proj r={rank}", *adapters[name]) for name in targets),
    ]
    if not gradient_checkpointing:
        return terms, extra, 0
    forward = sum(t.forward for t in terms)
    # the layer's last matmul, whose output backward does not need, is not recomputed: LoRA B of down, else down itself
    closing = 2 * seq * rank * d if "down" in targets else 2 * seq * inner * d
    return terms, extra, forward - text.num_hidden_layers * closing


def tower_share(count: FlopCount) -> dict[str, float]:
    """What a cache of the frozen tower's features removes: the vision tower and merger's forward as a share of a
    LoRA training step, and of a forward alone (a zero-shot prompt's prefill, generated tokens not counted)."""
    tower = sum(t.forward for t in count.terms if t.component in ("vision", "merger"))
    return {"tower_share_of_step": tower / count.train, "tower_share_of_forward": tower / count.forward}


DOCS_START, DOCS_END = "<!-- tower-share:start -->", "<!-- tower-share:end -->"


def tower_share_table(result: dict[str, Any]) -> str:
    """docs/performance.md's table of the tower's share, from `bench/results/vlm_flops.json` (nothing typed)."""
    params = result["parameters"]
    lines = [
        f"Counted by `bench/vlm_flops.py` ({params['image_size']} px memes, {params['text_tokens']} text tokens, LoRA q,v "
        f"r {params['lora_rank']}, {params['readout']} readout); FLOPs, not GPU time.",
        "",
        "| model | image + text tokens | tower forward / LoRA step | tower forward / forward (zero-shot prefill) |",
        "|---|---|---|---|",
    ]
    for name, row in result["all_configs"].items():
        lines.append(
            f"| {name} | {row['sequence_tokens']} | {100 * row['tower_share_of_step']:.0f} % | {100 * row['tower_share_of_forward']:.0f} % |"
        )
    return "\n".join(lines)


def six_n_t(parameters: int, tokens: int) -> int:
    """The dense-training rule 6·N·T, for comparison only (see the module docstring for why it does not apply)."""
    return 6 * parameters * tokens


def main(argv: list[str] | None = None) -> None:
    from common import Result, parser

    from bench.flop_counter_check import agreement_rows
    from bench.vlm_configs import parameter_count

    p = parser("FLOPs per meme of the Qwen2-VL LoRA classifier (counted), checked against FlopCounterMode", default_repeats=1)
    p.add_argument("--config", default="qwen2-vl-7b", choices=sorted(PUBLISHED))
    p.add_argument("--image-size", type=int, default=512)
    p.add_argument("--text-tokens", type=int, default=64)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--readout", default="head", choices=("head", "verbalizer"))
    args = p.parse_args(argv)

    summary, count = {}, None
    for name in sorted(PUBLISHED):  # every published config at the same sizes; the chosen one in full
        this = count_flops(name, args.image_size, args.text_tokens, "qv", args.lora_rank, args.readout)
        parameters = parameter_count(named_config(name))
        summary[name] = {"image_tokens": this.image_tokens, "sequence_tokens": this.sequence, "forward_tflops": this.forward / 1e12}
        summary[name].update(
            train_tflops=this.train / 1e12, parameters=parameters, six_n_t_over_counted=six_n_t(parameters, this.sequence) / this.train
        )
        summary[name].update(tower_share(this))
        count = this if name == args.config else count
    print(
        f"[vlm_flops] {args.config}: {args.image_size} px → {count.image_height}×{count.image_width}, {count.patches} patches, "
        f"{count.image_tokens} image + {count.text_tokens} text tokens, LoRA q,v r={args.lora_rank}, readout {args.readout}"
    )
    print(count.table())
    for name, row in summary.items():
        print(
            f"  {name:<15} {row['forward_tflops']:6.2f} TFLOPs forward, {row['train_tflops']:6.2f} per training step; "
            f"6·N·T (N={row['parameters'] / 1e9:.2f} B, T={row['sequence_tokens']}, for comparison only) is {row['six_n_t_over_counted']:.2f}× that"
        )

    rows = agreement_rows()
    print("\nFlopCounterMode agreement (small random Qwen2-VL, frozen base + PEFT LoRA q,v r=8):")
    for row in rows:
        print(
            f"  {row['case']:<52} {row['pass']:<16} counted {row['counted']:>14,} predicted {row['predicted']:>14,} "
            f"({row['relative_difference']:+.4%})"
        )

    result = Result(
        "vlm_flops",
        "FLOPs per meme of the Qwen2-VL LoRA classifier step (counted from the config), and does the count agree with "
        "torch.utils.flop_counter.FlopCounterMode on a small model?",
        args,
        {
            "config": args.config,
            "image_size": args.image_size,
            "text_tokens": args.text_tokens,
            "lora": "q,v",
            "lora_rank": args.lora_rank,
            "readout": args.readout,
            "small_model": rows[0]["model"] if rows else None,
        },
    )
    result.payload["flops"] = count.as_dict()
    result.payload["agreement"] = rows
    result.payload["all_configs"] = summary
    for row in rows:  # every case in the result file; one line of the README table for all of them
        key = re.sub(r"\W+", "_", f"{row['case']} {row['pass']}")
        result.variant(key, "FLOPs counted by FlopCounterMode", [row["counted"]], predicted=row["predicted"], over="one count")
        result.target(f"agreement_{key}", abs(row["relative_difference"]), "<=", 0.02, "|counted − predicted| / predicted")
    if rows:
        result.variant("agreement", "counted / predicted", [row["counted"] / row["predicted"] for row in rows], over="cases")
        worst = max(abs(row["relative_difference"]) for row in rows)
        result.ratio("worst_difference", worst, "largest |FlopCounterMode count − count_flops prediction| / prediction over the cases")
        result.target("agreement", worst, "<=", 0.02, "every case within 2 %")
        result.row(
            f"FlopCounterMode / counted FLOPs, {len(rows)} cases (eager and SDPA, head and verbalizer, checkpointing); ratio column: worst difference",
            "agreement",
            None,
            "worst_difference",
            "agreement",
            unit="×",
        )
    result.note(
        "Every FLOP figure is counted (formulas from the config; FlopCounterMode on CPU for the small model); none is a GPU measurement."
    )
    result.note(
        f"{args.config} per meme: {count.train / 1e12:.3f} TFLOPs per training step, {count.forward / 1e12:.3f} forward; "
        f"6·N·T would say {summary[args.config]['six_n_t_over_counted']:.2f}× that."
    )
    out = result.write()
    if not args.smoke and args.out is None:
        import json

        from bench.memory_plan_docs import DOCS, update_docs

        update_docs(tower_share_table(json.loads(out.read_text())), start=DOCS_START, end=DOCS_END)
        print(f"[vlm_flops] rewrote the tower-share table in {DOCS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""Vision feature cache: zero-shot prompts and training epochs with the frozen tower's features cached, against the tower.

    python bench/vision_cache.py [--smoke] [--repeats 2] [--memes 32] [--image-pixels 262144] [--batch-size 8] [--cv-memes 9]

The model is a random Qwen2-VL built like a checkpoint (src/crossmod/models/tiny/qwen_vl.py) whose vision tower (with its
merger) has Qwen2-VL-2B's share of the parameters: tower / language model = 0.431 in Qwen2-VL-2B's config
(bench/vlm_configs.py, counted on the meta device), 0.427 here (`parameters` in the result has both). Images are
resized by the processor to `--image-pixels`, 512² by default: the study's 512×512 memes at their size (504² after
Qwen2-VL's rounding to 28 px, 324 image tokens).

Variants, interleaved per round in balanced orders (bench/common.py), one torch thread:
- `zeroshot_cached` / `zeroshot_tower`: `crossmod.prompting.zeroshot.answer_all` (the zero-shot path: preprocessor, Lightning's
  predict loop, greedy `generate`, parsing) for the study's 6 prompts over the same memes, with a cache folder
  created empty for the round (the first prompt encodes every image, the other five read) or with
  `vision_cache=false`. Every meme generates exactly `--max-new-tokens` tokens in both (`min_new_tokens`).
  Throughput: memes·prompts per second.
- `epoch_cold` / `epoch_warm` / `epoch_tower`: one epoch of LoRA (q,v) + head training through Lightning's fit
  loop over the same batches from the same weights, with an empty cache (the first epoch of a run: encode and
  write), with the cache that epoch filled (every later epoch, fold and culture), and without a cache.
- `cv_crossmod` / `cv_hf`: the per-culture cross-validation protocol (`--cv-cultures` FT-<culture> models ×
  `--cv-folds` folds × `--cv-epochs` epochs on `--cv-memes` memes in five languages, the Multi3Hate layout), run by
  crossmod as `train.py experiment=qwen_lora_cv` runs each fold (its vision cache on, from an empty data folder) and
  by transformers.Trainer + PEFT on the same batches from the same weights (bench/cv_protocol.py); wall time of the
  whole protocol, held-out predictions compared meme by meme.
Every figure is measured on CPU; none is a GPU measurement. The tower's share of a step on real checkpoints is
counted, not measured: `bench/vlm_flops.py` (docs/performance.md).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cv_protocol  # noqa: E402
from common import ROOT, Result, bare_trainer, compose, interleave, parser, raw_dict, repeats, synthetic_samples  # noqa: E402

NAME = "vision_cache"
PROMPTS = range(6)
TOWER = {"vision_depth": 6, "vision_embed_dim": 160, "vision_heads": 4}  # with the language model below: 2B's ratio
LANGUAGE = {"hidden_size": 192, "num_layers": 7, "intermediate_size": 1280}
SMOKE_TOWER = {"vision_depth": 2, "vision_embed_dim": 32, "vision_heads": 2}
SMOKE_LANGUAGE = {"hidden_size": 64, "num_layers": 2}


def tower_share(model) -> float:
    """Parameters of the vision tower (merger included) over those of the language model (embeddings included)."""
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in n and "lora_" not in n)
    language = sum(p.numel() for n, p in model.named_parameters() if ".language_model." in n and "lora_" not in n)
    return vision / language


def fold_process_imports(rounds: int = 3) -> float:
    """Median seconds a fresh Python process takes to import what a fold run imports: `cross_validate.py` starts
    `train.py` once per fold and culture, which the in-process protocol above does not pay."""
    code = "import crossmod.training.pipeline, crossmod.models.module, crossmod.models.vlm.classifier, crossmod.data.memes, peft, transformers.models.qwen2_vl.modeling_qwen2_vl"
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = parser(__doc__.splitlines()[0], default_repeats=2)
    p.add_argument("--memes", type=int, default=None)
    p.add_argument("--image-pixels", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--cv-memes", type=int, default=None, help="memes per language in the cross-validation protocol")
    p.add_argument("--cv-cultures", type=int, default=None, help="FT-<culture> models (of US, DE, MX, IN, CN)")
    p.add_argument("--cv-folds", type=int, default=None)
    p.add_argument("--cv-epochs", type=int, default=None)
    p.add_argument("--num-workers", type=int, default=2, help="zero-shot preprocessing workers (configs/experiment/qwen_zeroshot.yaml)")
    p.add_argument(
        "--accelerator", default="cpu", choices=("cpu", "gpu"), help="where zero-shot and the epochs run (bench/gpu_proof.py: gpu)"
    )
    p.add_argument("--no-cv", action="store_true", help="leave out the cross-validation protocol (CPU; bench/gpu_proof.py on a GPU)")
    args = p.parse_args()
    cv = not args.no_cv
    smoke = args.smoke
    memes = args.memes or (4 if smoke else 32)
    pixels = args.image_pixels or (56 * 56 if smoke else 512 * 512)
    new_tokens = args.max_new_tokens or (2 if smoke else 4)
    protocol = {
        "memes": args.cv_memes or (4 if smoke else 9),
        "cultures": args.cv_cultures or (2 if smoke else 5),
        "folds": args.cv_folds or (2 if smoke else 3),
        "epochs": args.cv_epochs or (1 if smoke else 2),
    }

    import torch
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    from torch.utils.data import DataLoader

    from bench.vlm_configs import named_config
    from crossmod.data.synthetic import caption_corpus
    from crossmod.inference.scoring import single_device_trainer
    from crossmod.models.tiny.qwen_vl import build_tiny_qwen_vl
    from crossmod.models.vlm.cached_vision import CachedVision
    from crossmod.models.vlm.prompts import PromptSpec, prompt_corpus
    from crossmod.models.vlm.vision_cache import VisionFeatureStore
    from crossmod.prompting.zeroshot import answer_all

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="crossmod-vision-cache-"))
    spec = PromptSpec(**OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[1] / "configs/model/vlm.yaml").prompt))
    sizes = {**(SMOKE_TOWER if smoke else TOWER), **(SMOKE_LANGUAGE if smoke else LANGUAGE)}
    folder = build_tiny_qwen_vl(work / "model", caption_corpus() + prompt_corpus(spec), image_pixels=pixels, **sizes)
    records = [raw_dict(s) for s in synthetic_samples(memes, image_size=512)]

    def model(mode: str):
        overrides = [
            "model=vlm",
            f"model.name_or_path={folder}",
            f"model.fusion.mode={mode}",
            "model.fusion.vision_cache=false",
            "model.preprocessor.image_size=512",
            f"model.preprocessor.min_pixels={pixels}",
            f"model.preprocessor.max_pixels={pixels}",
        ] + (["model.fusion.lora=null"] if mode == "verbalizer" else [])
        torch.manual_seed(0)
        built = instantiate(OmegaConf.to_container(compose(overrides).model, resolve=True), _recursive_=False)
        built.configure_model()
        return built

    def cache_on(built, root: Path) -> None:
        store = VisionFeatureStore.open(root, str(folder), built.backbone.family.name, torch.float32)
        built.backbone.vision_cache = CachedVision(store)

    # zero-shot: 6 prompts per meme
    answering = model("verbalizer").eval()
    base = answering.backbone.base_model()
    base.generation_config.min_new_tokens = new_tokens
    predict = single_device_trainer(args.accelerator)

    def zeroshot(cached: bool) -> dict[str, float]:
        root = work / "zeroshot-cache"
        shutil.rmtree(root, ignore_errors=True)
        if cached:
            cache_on(answering, root)
        else:
            answering.backbone.vision_cache = None
        start = time.perf_counter()
        rows = [
            row
            for index in PROMPTS
            for row in answer_all(predict, answering, records, index, args.batch_size, new_tokens, args.num_workers)
        ]
        elapsed = time.perf_counter() - start
        assert len(rows) == memes * len(PROMPTS)
        return {"answers_per_s": len(rows) / elapsed, "seconds": elapsed, "p_hate": [r["p_hate"] for r in rows]}

    # training: one epoch of LoRA + head from the same weights over the same batches
    trainee = model("head")
    start_state = {k: v.clone() for k, v in trainee.state_dict().items()}
    batches = [trainee.preprocessor(r) for r in records]
    loader = DataLoader(batches, batch_size=args.batch_size, shuffle=False, collate_fn=trainee.preprocessor.collate)
    warm_root = work / "epoch-cache-warm"

    def epoch(kind: str) -> dict[str, float]:
        trainee.load_state_dict(start_state)
        if kind == "tower":
            trainee.backbone.vision_cache = None
        else:
            root = warm_root if kind == "warm" else work / "epoch-cache-cold"
            if kind == "cold":
                shutil.rmtree(root, ignore_errors=True)
            cache_on(trainee, root)
        torch.manual_seed(0)
        start = time.perf_counter()
        bare_trainer(max_epochs=1, accelerator=args.accelerator).fit(trainee, train_dataloaders=loader)
        return {"seconds": time.perf_counter() - start}

    # the per-culture cross-validation protocol, crossmod (cache on) against transformers.Trainer + PEFT
    layout = cv_protocol.write_layout(work / "multi3hate", protocol["memes"])
    cultures = list(cv_protocol.CULTURES[: protocol["cultures"]])

    def cv_crossmod() -> dict:
        done = cv_protocol.crossmod_protocol(layout, folder, work / "cv", cultures, protocol["epochs"], protocol["folds"])
        if any(done["runs"][key]["batches"] != plan[key]["batches"] for key in plan):
            raise RuntimeError("crossmod's seeded runs trained different batches in this round")
        return done

    def cv_hf() -> dict:
        return cv_protocol.hf_protocol(layout, folder, plan, 16, args.num_workers)

    plan = cv_protocol.crossmod_protocol(layout, folder, work / "cv", cultures, protocol["epochs"], protocol["folds"])["runs"] if cv else {}

    epoch("cold")  # warm-up: first-call allocations; fills nothing the measured rounds read (cold empties its folder)
    shutil.rmtree(warm_root, ignore_errors=True)
    cache_on(trainee, warm_root)
    bare_trainer(max_epochs=1, accelerator=args.accelerator).fit(trainee, train_dataloaders=loader)  # fills the warm folder once
    zeroshot(False)

    measured = interleave(
        {
            "zeroshot_cached": lambda: zeroshot(True),
            "zeroshot_tower": lambda: zeroshot(False),
            "epoch_cold": lambda: epoch("cold"),
            "epoch_warm": lambda: epoch("warm"),
            "epoch_tower": lambda: epoch("tower"),
            **({"cv_crossmod": cv_crossmod, "cv_hf": cv_hf} if cv else {}),
        },
        repeats(args),
    )
    same = max(abs(a - b) for a, b in zip(measured["zeroshot_cached"][0]["p_hate"], measured["zeroshot_tower"][0]["p_hate"]))

    imports = fold_process_imports() if cv else None
    fold_runs = len(cultures) * protocol["folds"]
    cv_same = (
        max(cv_protocol.largest_difference(a["predictions"], b["predictions"]) for a, b in zip(measured["cv_crossmod"], measured["cv_hf"]))
        if cv
        else None
    )

    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):  # Qwen2-VL-2B's shapes, no memory, no weights
        real_ratio = tower_share(AutoModelForImageTextToText.from_config(named_config("qwen2-vl-2b")))
    result = Result(
        NAME,
        "What does caching the frozen vision tower's features save, per zero-shot prompt set, per training epoch and over the "
        "per-culture cross-validation protocol against transformers.Trainer + PEFT (tiny Qwen2-VL with Qwen2-VL-2B's tower : "
        "language-model parameter ratio, CPU)?",
        args,
        {
            "model": f"random Qwen2-VL, {sizes}, images at {pixels} px",
            "tower_over_language_model": round(tower_share(trainee.backbone.base_model()), 3),
            "qwen2_vl_2b_tower_over_language_model": round(real_ratio, 3),
            "memes": memes,
            "prompts": len(PROMPTS),
            "batch_size": args.batch_size,
            "max_new_tokens": new_tokens,
            "torch_threads": 1,
            "accelerator": args.accelerator,
            "max_p_hate_difference_cached_vs_tower": same,
            "cv_protocol": {**protocol, "cultures": cultures, "batch_size": 16, "loader_workers": args.num_workers} if cv else None,
            "cv_max_p_hate_difference_crossmod_vs_hf": cv_same,
            "fold_process_imports_s": round(imports, 2) if cv else None,
        },
    )
    for name in ("zeroshot_cached", "zeroshot_tower"):
        result.variant(name, "answers/s", [r["answers_per_s"] for r in measured[name]])
    for name in ("epoch_cold", "epoch_warm", "epoch_tower"):
        result.variant(name, "s/epoch", [r["seconds"] for r in measured[name]])
    if cv:
        result.variant("cv_crossmod", "s/protocol", [r["seconds"] for r in measured["cv_crossmod"]])
        result.variant("cv_hf", "s/protocol", [r["seconds"] for r in measured["cv_hf"]])
        cv_ratio = result.paired(
            "cv_crossmod/cv_hf",
            [r["seconds"] for r in measured["cv_crossmod"]],
            [r["seconds"] for r in measured["cv_hf"]],
            "wall time of the whole per-culture protocol, crossmod with the vision cache / transformers.Trainer + PEFT, same round",
        )
        with_processes = result.paired(
            "cv_crossmod_in_fold_processes/cv_hf",
            [r["seconds"] + fold_runs * imports for r in measured["cv_crossmod"]],
            [r["seconds"] for r in measured["cv_hf"]],
            "as cv_crossmod/cv_hf with a fresh process's imports added per fold run, as cross_validate.py runs them (imports measured "
            "apart, fold_process_imports_s)",
        )
    zeroshot_ratio = result.paired(
        "zeroshot_cached/zeroshot_tower",
        [r["answers_per_s"] for r in measured["zeroshot_cached"]],
        [r["answers_per_s"] for r in measured["zeroshot_tower"]],
        "answers/s with the cache (first prompt encodes, five read) / without, same round",
    )
    cold_ratio = result.paired(
        "epoch_cold/epoch_tower",
        [r["seconds"] for r in measured["epoch_cold"]],
        [r["seconds"] for r in measured["epoch_tower"]],
        "time of a first (cold) epoch with the cache / the same epoch without it, same round",
    )
    warm_ratio = result.paired(
        "epoch_warm/epoch_tower",
        [r["seconds"] for r in measured["epoch_warm"]],
        [r["seconds"] for r in measured["epoch_tower"]],
        "time of a later (warm) epoch / the same epoch without the cache, same round",
    )
    result.row(
        "zero-shot, 6 prompts per meme: cached vs tower",
        "zeroshot_cached",
        "zeroshot_tower",
        "zeroshot_cached/zeroshot_tower",
        "zeroshot_2x",
        unit="answers/s",
    )
    result.row("first training epoch (cache cold) vs tower", "epoch_cold", "epoch_tower", "epoch_cold/epoch_tower", "cold_epoch", unit="s")
    result.row("later training epoch (cache warm) vs tower", "epoch_warm", "epoch_tower", "epoch_warm/epoch_tower", None, unit="s")
    if cv:
        result.row(
            "per-culture CV protocol: crossmod (vision cache) vs transformers.Trainer + PEFT",
            "cv_crossmod",
            "cv_hf",
            "cv_crossmod/cv_hf",
            "cv_vs_hf",
            unit="s",
        )
        result.target(
            "cv_vs_hf", cv_ratio, "<=", 0.70, "the protocol's wall time with crossmod and its cache / with transformers.Trainer + PEFT"
        )
        result.target(
            "cv_predictions_equal", cv_same, "<=", 1e-5, "held-out P(hate) of every culture's model equal to transformers.Trainer's (fp32)"
        )
    result.target("zeroshot_2x", zeroshot_ratio, ">=", 2.0, "6 prompts per meme: at least 2x the answers/s with the cache")
    result.target("cold_epoch", cold_ratio, "<=", 1.05, "a cold first epoch costs no more than without the cache (5 % for noise)")
    result.target("cached_answers_equal", same, "<=", 1e-5, "P(hate) with the cache equals the tower's (fp32)")
    if cv:
        result.finding(
            f"The per-culture protocol ({len(cultures)} cultures x {protocol['folds']} folds x {protocol['epochs']} epochs, "
            f"{protocol['memes'] * 5} memes): crossmod with the vision cache took {cv_ratio:.2f}x the wall time of transformers.Trainer + PEFT "
            f"on the same batches from the same weights; held-out P(hate) differ by at most {cv_same:.1e}. Both ran in one process; "
            f"cross_validate.py starts a process per fold run, whose imports ({imports:.1f} s each here) make it {with_processes:.2f}x."
        )
    result.finding(
        f"Six zero-shot prompts per meme: {zeroshot_ratio:.2f}x the answers per second with the cache. A training epoch: "
        f"{cold_ratio:.2f}x the tower's time when the cache is cold (it encodes and writes), {warm_ratio:.2f}x once it holds the images: "
        f"the frozen tower's measured share of a training epoch on this model is {1 - warm_ratio:.0%}."
    )
    result.write()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

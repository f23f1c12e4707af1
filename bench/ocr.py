"""OCR on meme images: character error rate per language and engine, memes/s, and what reading captions
off the images costs a trained fusion model (AUROC with OCR captions against the true captions).

    python bench/ocr.py [--smoke] [--scored-renders 2] [--auroc-memes N] [--stored-size-memes 300]

1. Settings, chosen apart from what is scored: RapidOCR's `det_unclip_ratio` (how far detected text boxes
   are grown before recognition) and `use_cls` (its angle classifier) are searched on captions 0–3 of bench/rendered_memes.py (seed 1000+),
   in the languages its recogniser reads (en, de, es, zh), and Tesseract's meme-text mask on all five;
   the best are compared with crossmod's defaults (`crossmod.data.ocr.RAPIDOCR_SETTINGS`,
   `TESSERACT_MEME_TEXT_MASK`).
2. Scored renders: captions 4–11 in en, de, es, hi, zh (seeds 0, 1, …; 512 px), read by RapidOCR with the
   wheel's configuration, RapidOCR with crossmod's settings, and Tesseract (each meme with its own
   language's data; with crossmod's meme-text mask and on the picture itself) when the program and
   language data are installed. CER is jiwer's over all memes of
   a language (edits / reference characters, the line break between top and bottom text included);
   memes/s is one engine reading its memes one after another in this process.
3. AUROC: the default experiment (`python train.py data.source.image_text=caption`, concat fusion on the
   synthetic memes with the caption itself drawn on each image, so OCR can read it back) is trained,
   every culture exported (`export.py`) and its test split scored with `predict.py` four ways: the true
   captions with the stored 128 px images (the reference), the true captions with the same memes drawn at
   512 px (the generator draws the caption at the same share of the image, so the model's 64 px input is
   alike), images alone at 512 px with `ocr=rapidocr`, and images alone at the stored 128 px with
   `ocr=rapidocr` (the first `--stored-size-memes`). AUROC per culture with
   `crossmod.evaluation.metrics.culture_auroc` (scikit-learn).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from common import ROOT, Result, parser  # noqa: E402
from rendered_memes import CAPTIONS, LANGS, SCRIPT, render  # noqa: E402

NAME = "ocr"
TUNING_CAPTIONS, SCORED_CAPTIONS = range(0, 4), range(4, 12)
TUNING_SEED = 1000
UNCLIP_GRID = (1.6, 2.0, 2.5, 3.0)
CLS_GRID = (True, False)  # RapidOCR's angle classifier: turn lines it takes for upside down
RAPIDOCR_LANGS = ("en", "de", "es", "zh")  # the wheel's recogniser: Chinese and Latin script, no Devanagari
LATIN_CER_TARGET, AUROC_GAP_TARGET = 0.10, 0.05


def read_all(engine, memes: list[tuple[bytes, str]]) -> tuple[list[str], float]:
    """Every meme's caption as crossmod forms it (lines top to bottom), and the seconds it took."""
    from crossmod.data.ocr import caption

    start = time.perf_counter()
    texts = [caption(engine.lines(image)) for image, _ in memes]
    return texts, time.perf_counter() - start


def cer(memes: list[tuple[bytes, str]], texts: list[str]) -> float:
    import jiwer

    return float(jiwer.cer([truth for _, truth in memes], texts))


def tesseract_or_reason(lang: str, meme_text_mask: bool):
    from crossmod.data.ocr import TesseractOcr

    try:
        return TesseractOcr([lang], meme_text_mask=meme_text_mask), None
    except (ImportError, FileNotFoundError, ValueError) as error:
        return None, str(error)


def tune(result: Result, renders: int, captions: range) -> dict:
    from crossmod.data.ocr import RAPIDOCR_SETTINGS, TESSERACT_MEME_TEXT_MASK, RapidOcr

    memes = [render(lang, i, TUNING_SEED + r) for lang in RAPIDOCR_LANGS for i in captions for r in range(renders)]
    scores = {}
    for unclip, use_cls in itertools.product(UNCLIP_GRID, CLS_GRID):
        texts, _ = read_all(RapidOcr(RAPIDOCR_LANGS, det_unclip_ratio=unclip, use_cls=use_cls), memes)
        scores[(unclip, use_cls)] = cer(memes, texts)
        print(
            f"  tuning det_unclip_ratio={unclip} use_cls={use_cls}: CER {scores[(unclip, use_cls)]:.4f} on {len(memes)} memes", flush=True
        )
    unclip, use_cls = min(scores, key=scores.get)
    best = {"det_unclip_ratio": unclip, "use_cls": use_cls}
    result.payload["tuning"] = {
        "settings": ["det_unclip_ratio", "use_cls"],
        "memes": len(memes),
        "languages": list(RAPIDOCR_LANGS),
        "captions": [captions.start, captions.stop - 1],
        "seeds": [TUNING_SEED, TUNING_SEED + renders - 1],
        "cer": {f"det_unclip_ratio={u} use_cls={c}": round(v, 4) for (u, c), v in scores.items()},
        "best": best,
        "crossmod_default": RAPIDOCR_SETTINGS,
    }
    differing = sum(RAPIDOCR_SETTINGS.get(k) != v for k, v in best.items())
    tesseract = tune_tesseract(result, renders, captions)
    differing += tesseract is not None and tesseract != TESSERACT_MEME_TEXT_MASK
    result.target(
        "default_is_tuning_choice", differing, "<=", 0.0, "settings where crossmod's OCR defaults differ from the tuning renders' best"
    )
    return best


def tune_tesseract(result: Result, renders: int, captions: range) -> bool | None:
    """Tesseract's `meme_text_mask` (read the outlined text as black print, or the picture) on the tuning
    renders of all five languages; None when Tesseract or a language's data is missing."""
    memes = {lang: [render(lang, i, TUNING_SEED + r) for i in captions for r in range(renders)] for lang in LANGS}
    scores = {}
    for mask in (True, False):
        texts, truths = [], []
        for lang in LANGS:
            engine, reason = tesseract_or_reason(lang, mask)
            if engine is None:
                result.payload["tuning"]["tesseract"] = {"skipped": reason}
                return None
            texts += read_all(engine, memes[lang])[0]
            truths += memes[lang]
        scores[mask] = cer(truths, texts)
        print(f"  tuning tesseract meme_text_mask={mask}: CER {scores[mask]:.4f} on {len(truths)} memes", flush=True)
    best = min(scores, key=scores.get)
    result.payload["tuning"]["tesseract"] = {"cer": {f"meme_text_mask={k}": round(v, 4) for k, v in scores.items()}, "best": best}
    return best


def score_engines(result: Result, renders: int, captions: range) -> None:
    from crossmod.data.ocr import WHEEL_DEFAULTS, RapidOcr

    memes = {lang: [render(lang, i, r) for i in captions for r in range(renders)] for lang in LANGS}
    engines = {"rapidocr_wheel": RapidOcr(RAPIDOCR_LANGS, **WHEEL_DEFAULTS), "rapidocr": RapidOcr(RAPIDOCR_LANGS)}
    table: dict[str, dict[str, dict]] = {}
    for name, engine in engines.items():
        for lang in LANGS:
            texts, seconds = read_all(engine, memes[lang])
            table.setdefault(name, {})[lang] = entry(memes[lang], texts, seconds)
            if lang not in RAPIDOCR_LANGS:
                table[name][lang]["note"] = "outside the recogniser's character set (Chinese + Latin)"
    for name, mask in (("tesseract", True), ("tesseract_plain", False)):
        for lang in LANGS:
            engine, reason = tesseract_or_reason(lang, mask)
            if engine is None:
                table.setdefault(name, {})[lang] = {"skipped": reason}
                continue
            texts, seconds = read_all(engine, memes[lang])
            table.setdefault(name, {})[lang] = entry(memes[lang], texts, seconds)
    result.payload["cer"] = table
    for name, per_lang in table.items():
        shown = ", ".join(f"{lang} {v['cer']:.3f}" if "cer" in v else f"{lang} –" for lang, v in per_lang.items())
        print(f"  {name}: CER {shown}", flush=True)
    latin = max(table["rapidocr"][lang]["cer"] for lang in LANGS if SCRIPT[lang] == "Latin")
    result.target("latin_cer", latin, "<=", LATIN_CER_TARGET, "worst Latin-script CER (en, de, es) of crossmod's default engine, rapidocr")
    result.finding(cer_finding(table, sum(len(m) for m in memes.values())))


def cer_finding(table: dict[str, dict[str, dict]], memes: int) -> str:
    return (
        "OCR CER per language on the scored renders (rapidocr with crossmod's settings / with the wheel's / tesseract with the "
        "meme-text mask / tesseract on the picture): "
        + "; ".join(
            f"{lang} {fmt(table['rapidocr'][lang])} / {fmt(table['rapidocr_wheel'][lang])} / {fmt(table['tesseract'][lang])} / "
            f"{fmt(table['tesseract_plain'][lang])}"
            for lang in LANGS
        )
        + f" — {memes} rendered 512 px memes, captions not seen in tuning. rapidocr's models have no Devanagari."
    )


def fmt(entry: dict) -> str:
    return f"{entry['cer']:.3f}" if "cer" in entry else "not installed"


def memes_per_second(per_lang: dict[str, dict]) -> float | None:
    """Memes/s over the languages an engine read; None when it read none (Tesseract not installed)."""
    read = [v for v in per_lang.values() if "memes" in v]
    if not read:
        return None
    return round(sum(v["memes"] for v in read) / sum(v["memes"] / v["memes_per_s"] for v in read), 2)


def entry(memes: list[tuple[bytes, str]], texts: list[str], seconds: float) -> dict:
    return {
        "cer": round(cer(memes, texts), 4),
        "memes": len(memes),
        "memes_per_s": round(len(memes) / seconds, 3),
        "examples": [{"truth": truth, "read": text} for (_, truth), text in list(zip(memes, texts))[:2]],
    }


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "CROSSMOD_RUN_ID": "ocr-bench"}
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed:\n{done.stderr[-4000:]}")
    return done


def auroc_with_ocr(result: Result, work: Path, smoke: bool, limit: int | None, stored_limit: int) -> None:
    from omegaconf import OmegaConf

    from crossmod.data.synthetic import SyntheticMemeSource
    from crossmod.evaluation.metrics import culture_auroc

    data = ["data.source.num_groups=40", "data.samples_per_shard=64", "debug=limit"] if smoke else []
    run("train.py", f"paths.log_dir={work / 'runs'}", "print_table=false", "data.source.image_text=caption", *data)
    (run_dir,) = (work / "runs").glob("*/runs/ocr-bench")
    config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    params = {k: v for k, v in config["data"]["source"].items() if k != "_target_"}
    cultures = list(config["data"]["heads"])[: 1 if smoke else None]  # smoke: one culture's four predict.py runs
    run("export.py", f"run={run_dir}", f"out={work / 'export'}")
    stored = [s for s in SyntheticMemeSource(**params) if s.split == "test"][:limit]
    drawn = {s.id: s for s in SyntheticMemeSource(**{**params, "image_size": 512}) if s.split == "test"}
    inputs = {name: work / name for name in ("true_128", "true_512", "ocr_512", "ocr_128")}
    for folder in inputs.values():
        folder.mkdir()
    with open(inputs["true_128"] / "memes.jsonl", "w") as true_128, open(inputs["true_512"] / "memes.jsonl", "w") as true_512:
        for n, sample in enumerate(stored):
            (inputs["true_128"] / f"{n}.jpg").write_bytes(sample.image)
            (inputs["ocr_512"] / f"{n}.jpg").write_bytes(drawn[sample.id].image)
            (inputs["true_512"] / f"{n}.jpg").write_bytes(drawn[sample.id].image)
            if n < stored_limit:
                (inputs["ocr_128"] / f"{n}.jpg").write_bytes(sample.image)
            true_128.write(json.dumps({"id": str(n), "text": sample.text, "image": f"{n}.jpg"}) + "\n")
            true_512.write(json.dumps({"id": str(n), "text": sample.text, "image": f"{n}.jpg"}) + "\n")
    sources = {
        "true_128": inputs["true_128"] / "memes.jsonl",
        "true_512": inputs["true_512"] / "memes.jsonl",
        "ocr_512": inputs["ocr_512"],
        "ocr_128": inputs["ocr_128"],
    }
    aurocs: dict[str, dict[str, float]] = {name: {} for name in sources}
    seconds: dict[str, float] = {}
    ocr_texts: dict[str, dict[str, str]] = {}
    for culture in cultures:
        for name, source in sources.items():
            out = work / f"{name}-{culture}.jsonl"
            ocr = ["ocr=rapidocr", "ocr_langs=[en,de,es]", f"ocr_cache={work / f'{name}.ocr.jsonl'}"] if name.startswith("ocr") else []
            start = time.perf_counter()
            run("predict.py", f"adapters={work / 'export' / culture}", f"inputs={source}", f"out={out}", *ocr)
            seconds.setdefault(name, time.perf_counter() - start)  # the first culture's run reads every caption
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            labels = [stored[int(row["id"])].labels[culture] for row in rows]
            aurocs[name][culture] = round(culture_auroc(labels, [row[f"{culture}_probability"] for row in rows]), 4)
            if name.startswith("ocr"):
                ocr_texts[name] = {row["id"]: row["ocr_text"] for row in rows}
        print(f"  {culture}: " + ", ".join(f"{name} {aurocs[name][culture]}" for name in sources), flush=True)
    means = {name: round(float(np.nanmean(list(values.values()))), 4) for name, values in aurocs.items()}  # NaN: one class only
    caption_cer = {
        name: round(cer([(b"", stored[int(i)].text) for i in texts], [t.replace("\n", " ") for t in texts.values()]), 4)
        for name, texts in ocr_texts.items()
    }
    result.payload["auroc"] = {
        "model": "python train.py (experiment=synthetic_concat, data.source.image_text=caption"
        + (", smoke data" if smoke else "")
        + "), every culture exported",
        "test_memes": len(stored),
        "stored_size_memes": min(stored_limit, len(stored)),
        "per_culture": {name: {c: None if math.isnan(v) else v for c, v in values.items()} for name, values in aurocs.items()},
        "mean": means,
        "caption_cer": caption_cer,
        "first_predict_s": {name: round(s, 1) for name, s in seconds.items()},
    }
    gap = abs(means["ocr_512"] - means["true_128"])
    result.target(
        "auroc_gap",
        gap,
        "<=",
        AUROC_GAP_TARGET,
        "|mean AUROC, images alone at 512 px + OCR − mean AUROC, true captions| on the synthetic test split",
    )
    result.finding(
        f"Synthetic test split ({len(stored)} memes, every culture): mean AUROC {means['true_128']} with the true captions, "
        f"{means['true_512']} with the true captions on the memes drawn at 512 px, {means['ocr_512']} from the 512 px images alone "
        f"with ocr=rapidocr (caption CER {caption_cer.get('ocr_512')}), {means['ocr_128']} from the stored 128 px images alone "
        f"({min(stored_limit, len(stored))} memes, caption CER {caption_cer.get('ocr_128')}: the stored memes' 9 px text is below "
        "what PP-OCR reads, and the lost spaces break the tokenizer's words)."
    )


def main() -> None:
    p = parser(__doc__.splitlines()[0], default_repeats=1)
    p.add_argument("--tuning-renders", type=int, default=None, help="renders of each tuning caption (default 2, smoke 1)")
    p.add_argument("--scored-renders", type=int, default=None, help="renders of each scored caption (default 2, smoke 1)")
    p.add_argument("--auroc-memes", type=int, default=None, help="synthetic test memes scored (default: the whole split, smoke 24)")
    p.add_argument("--stored-size-memes", type=int, default=None, help="of those, read at the stored 128 px (default 300, smoke 6)")
    args = p.parse_args()
    smoke = args.smoke
    tuning_renders = args.tuning_renders or (1 if smoke else 2)
    scored_renders = args.scored_renders or (1 if smoke else 2)
    auroc_memes = args.auroc_memes or (24 if smoke else None)
    stored_memes = args.stored_size_memes or (6 if smoke else 300)
    tuning_captions = range(0, 1) if smoke else TUNING_CAPTIONS
    scored_captions = range(4, 5) if smoke else SCORED_CAPTIONS
    result = Result(
        NAME,
        "How well do crossmod's OCR engines read meme captions per language and script, how fast, and what does reading "
        "captions off the images cost a trained fusion model's AUROC?",
        args,
        {
            "tuning": {
                "captions": [tuning_captions.start, tuning_captions.stop - 1],
                "renders": tuning_renders,
                "grid": {"det_unclip_ratio": list(UNCLIP_GRID), "use_cls": list(CLS_GRID)},
            },
            "scored": {"captions": [scored_captions.start, scored_captions.stop - 1], "renders": scored_renders, "languages": list(LANGS)},
            "auroc_memes": auroc_memes or "test split",
            "stored_size_memes": stored_memes,
            "captions": {lang: len(CAPTIONS[lang]) for lang in LANGS},
        },
    )
    print("== settings (tuning renders)", flush=True)
    tune(result, tuning_renders, tuning_captions)
    print("== CER per language and engine (scored renders)", flush=True)
    score_engines(result, scored_renders, scored_captions)
    print("== AUROC: true captions vs captions read off the images", flush=True)
    with tempfile.TemporaryDirectory(prefix="crossmod-ocr-bench-") as work:
        auroc_with_ocr(result, Path(work), smoke, auroc_memes, stored_memes)
    table, auroc = result.payload["cer"], result.payload["auroc"]
    latin = [lang for lang in LANGS if SCRIPT[lang] == "Latin"]
    result.variant("cer_latin_rapidocr", "CER", [table["rapidocr"][lang]["cer"] for lang in latin], over="en, de, es")
    result.variant("cer_latin_wheel", "CER", [table["rapidocr_wheel"][lang]["cer"] for lang in latin], over="en, de, es")
    result.ratio(
        "latin_cer", max(table["rapidocr"][lang]["cer"] for lang in latin), "worst Latin-script CER of rapidocr with crossmod's settings"
    )
    result.row(
        "Latin CER (en, de, es), crossmod's rapidocr settings vs the wheel's; ratio column: worst language",
        "cer_latin_rapidocr",
        "cer_latin_wheel",
        "latin_cer",
        "latin_cer",
        scale=100,
        unit="%",
    )
    for name in ("ocr_512", "true_128"):
        values = [v for v in auroc["per_culture"][name].values() if v is not None]
        result.variant(f"auroc_{name}", "AUROC", values, over="cultures")
    result.ratio(
        "auroc_gap",
        abs(auroc["mean"]["ocr_512"] - auroc["mean"]["true_128"]),
        "|mean AUROC with OCR captions − with true captions| (AUROC points)",
    )
    result.row(
        "AUROC per culture, synthetic test images alone + ocr=rapidocr vs true captions; ratio column: gap of the means",
        "auroc_ocr_512",
        "auroc_true_128",
        "auroc_gap",
        "auroc_gap",
        scale=100,
        unit="%",
    )
    speed = {name: memes_per_second(per_lang) for name, per_lang in table.items()}
    result.payload["memes_per_s"] = speed
    result.finding(
        "Memes/s reading 512 px memes one after another (all languages): "
        + ", ".join(f"{name} {'not installed' if value is None else value}" for name, value in speed.items())
        + "."
    )
    result.note(
        "CER and memes/s come from one process reading memes one after another with onnxruntime's and Tesseract's default threads; no GPU."
    )
    result.write()


if __name__ == "__main__":
    main()

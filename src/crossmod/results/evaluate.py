"""Evaluation reports for trained runs or exported cultures on any dataset (what `evaluate.py` runs): load the
models, predict, write predictions, figures, report.json and summary.md; the scores come from `crossmod.evaluation.run_report`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from crossmod.data.cache_files import write_file
from crossmod.data.heads import Head
from crossmod.evaluation.alignment import marker_test, markers, mean_alignment
from crossmod.evaluation.functional import functionality_bars
from crossmod.evaluation.plots import alignment_heatmap, roc_figure
from crossmod.evaluation.predictions import labelled_pairs
from crossmod.evaluation.run_report import functionality_figure, score_run, summary_markdown
from crossmod.inference.new_memes import write_predictions
from crossmod.results.run_figures import write_png
from crossmod.results.scored_splits import ScoredSplit


class Loaded:
    """A model already built (e.g. to check its weights before any data is read), handed over once: the scoring
    loop drops it after scoring, so it does not outlive its turn."""

    def __init__(self, model: Any) -> None:
        self.model: Any = model

    def __call__(self) -> Any:
        model, self.model = self.model, None
        return model


CARD = "culture_card.json"


def export_folders(ckpt: Path) -> list[Path]:
    """The exported culture folders `ckpt` is or holds (an export's parent holds one per culture)."""
    if not ckpt.is_dir():
        return []
    if (ckpt / CARD).is_file():
        return [ckpt]
    return sorted(child for child in ckpt.iterdir() if child.is_dir() and (child / CARD).is_file())


def report_folder(out: str | None, ckpt: Path, dataset: str, split: str, root: Path) -> Path:
    """Where evaluate writes its report: `out=`, else beside a run (`<run>/report-<dataset>-<split>`, the run's own
    folder), else, for exported culture folders, under `<root>/evaluations/<export folder>/`. An export may be a
    shared, read-only copy that others load: evaluate never writes inside one, not even when told to."""
    exports = export_folders(ckpt)
    name = f"report-{dataset}-{split}"
    if out:
        target = Path(out).absolute()
        inside = next((e for e in exports if target.resolve().is_relative_to(e.resolve())), None)
        if inside is not None:
            from crossmod.runtime.user_errors import UserError

            raise UserError(f"out={out} lies inside the exported folder {inside}", "give a report folder outside it: out=<dir>", "out")
        return target
    if exports:
        folder = ckpt.absolute()
        return root / "evaluations" / folder.parent.name / folder.name / name  # the names on this machine, never the card's
    return (ckpt.parent if ckpt.is_file() else ckpt) / name


Scorer = Callable[[Any, list[dict[str, Any]], int, float], list[dict[str, Any]]]


def one_device_scorer(accelerator: str = "cpu") -> Scorer:
    """Lightning's predict loop in this process, on one device: scoring that runs inside another job (transfer
    scoring after training, on rank 0)."""
    from crossmod.inference.scoring import score, single_device_trainer

    trainer = single_device_trainer(accelerator)
    return lambda model, records, batch_size, threshold, calibrators=None: score(
        trainer, model, records, batch_size, threshold, calibrators=calibrators
    )


def scoring_rule(model: Any) -> str:
    """How the model's scores are made, as a report states it: its head layers, or a retrieval vote with its settings."""
    while not hasattr(model, "scoring") and hasattr(model, "model"):  # a mapped head (ScoredAs) scores by its model's rule
        model = model.model
    scoring = getattr(model, "scoring", None)
    if scoring is None or not scoring.needs_bank:
        return "the head layers"
    settings, bank = model.retrieval_settings, model.bank()
    return f"a retrieval vote: the k={settings.k} nearest of {len(bank.ids)} labelled memes, {settings.weighting} weighting"


def evaluate(
    models: list[tuple[str, Callable[[], Any]]],
    scored: Mapping[str, ScoredSplit],
    data_heads: dict[str, Head],
    out: Path,
    batch_size: int,
    threshold: float,
    dataset: str,
    scorer: Scorer | None = None,
    writer: bool = True,
) -> dict[str, Any]:
    """Score each run on its own memes (`scored[name]`: a fold run's held-out fold, or a split) and write
    report.json, summary.md, per-run predictions and the figures into `out`.

    `models`: (name, loader), each model built when its turn comes and dropped after it. `scorer`: rows of
    (model, records, batch size, threshold, calibration maps by head: the run's, applied beside the raw probability as
    predict applies an export's): Lightning's predict loop (src/crossmod/inference/scoring.py) on the job's trainer,
    which every process of a data-parallel job runs (default: one device, this process); only the `writer` (rank 0)
    writes files."""
    scorer = scorer or one_device_scorer()
    missing = [name for name, _ in models if name not in scored]
    if missing:
        raise KeyError(f"no memes to score for run(s) {missing} (given for {sorted(scored)})")
    if writer:
        out.mkdir(parents=True, exist_ok=True)
    scored_ids = {r["id"] for name, _ in models for r in scored[name].records}
    report: dict[str, Any] = {"dataset": dataset, "items": len(scored_ids), "runs": {}}
    matrices = []
    for name, load in models:
        records = scored[name].records
        model = load()
        calibrators = scored[name].calibrators
        if getattr(model, "trained", None) in calibrators:  # a mapped head (ScoredAs): the trained head's map, under its name
            calibrators = {next(iter(model.heads)): calibrators[model.trained]}
        rows = scorer(model, records, batch_size, threshold, calibrators)
        heads, head_rule, scored_by = model.heads, model.head_rule, scoring_rule(model)
        del model  # one model in memory at a time
        if not writer:
            continue
        write_predictions(rows, out / "predictions" / f"{name.replace('/', '_')}.csv")
        scores = score_run(rows, records, heads, data_heads, threshold)
        matrices.append(scores.alignment)
        report["runs"][name] = {
            "split": scored[name].describe(),
            "selection": scored[name].selection,
            "scored_by": scored_by,
            "metrics": scores.metrics,
            "alignment": scores.alignment,
            **scores.sections,
        }
        if scored[name].baselines:  # the run's baselines on these very memes, beside its numbers
            report["runs"][name]["baselines"] = scored[name].baselines
        if head_rule:  # a mapped head (evaluate.py head=, transfer.head): which trained head answered, and why
            report["runs"][name]["head"] = head_rule
        if "mhc" in scores.sections:
            section = scores.sections["mhc"]
            write_png(lambda buffer, section=section: functionality_bars(section, buffer), out / functionality_figure(name))
        if scores.alignment and name == models[0][0]:
            roc = labelled_pairs(scores.probs, scores.labels)
            if roc:
                write_png(lambda buffer, roc=roc: roc_figure(roc, buffer, f"{dataset}: ROC per head"), out / "roc.png")
            alignment = scores.alignment
            write_png(lambda buffer, alignment=alignment: alignment_heatmap(alignment, buffer, f"{dataset}: culture alignment"), out / "alignment.png")
    if not writer:
        return report
    if any(matrices):
        report["alignment"] = {
            "mean": mean_alignment(matrices),
            "markers": markers(matrices),
            "runs": len(matrices),
            **marker_test(matrices),  # the test's name, alpha, and a note when too few runs allow no marker
        }
    # every file through the one writer: a link planted in the report folder is replaced, never written through
    write_file(out / "report.json", json.dumps(report, indent=1, default=float).encode(), "report", user_folder=True)
    figures = [figure for figure in ("alignment.png", "roc.png") if (out / figure).is_file()]
    write_file(out / "summary.md", summary_markdown(report, figures).encode(), "report", user_folder=True)
    return report

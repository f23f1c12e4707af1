"""Every dataset through every job: train → export (head, and retrieval where the heads allow it) → predict →
evaluate the export → cv_report, on each data config's fixture in its release's real layout.

Each dataset trains one fold run of the text family (it reads every dataset; its sentence embedding is what a
retrieval export stores) as `train.py` is run, then every later job runs on what the one before wrote: the exports as
`export.py` builds them (its functions, in this process), `predict.py` and `evaluate.py` as commands, the report as
`crossmod cv-report` computes it. A cell either works (and its numbers are the run's) or is refused by name;
the expected table is written out below, so a job that starts failing for one dataset fails here.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, SMALL_DATA, TrainRun, scaled
from tests.data.sources import layouts
from tests.zygote import run_python

pytestmark = pytest.mark.slow

# dataset → (the overrides that point its data config at the fixture, the culture or task head exported)
FIXTURES = {
    "synthetic": (lambda root, shards: list(SMALL_DATA), "US"),
    "hateful_memes": (lambda root, shards: [f"data.raw_dir={layouts.hateful_memes(root / 'hm', train=16, dev=6, test=6)}"], "hateful"),
    "multi3hate": (lambda root, shards: [f"data.raw_dir={layouts.multi3hate(root / 'm3h')}"], "DE"),
    "mhc": (lambda root, shards: [f"data.raw_dir={layouts.mhc(root / 'mhc', cases=8)}"], "hateful"),
    "toxictags": (lambda root, shards: [f"data.raw_dir={layouts.toxictags(root / 'tt', items=16)}"], "toxic"),
    "memebridge": (lambda root, shards: [f"data.raw_dir={layouts.memebridge(root / 'mb', items=16)}"], "sentiment"),
    "shards": (lambda root, shards: [f"data.shard_dir={shards}"], "US"),  # the synthetic shards, as another job wrote them
}
TRAIN = ("model=text", "fold=0", "num_folds=2", "trainer.max_epochs=1", "data.num_workers=0", "data.batch_size=4", "print_table=false")
# What each job does with each dataset: "works", or the words its refusal names the problem with.
RETRIEVAL_NEEDS_BINARY = "binary"
SEQ_CLS_NEEDS_VLM = "format=hf_seq_cls exports a VLM classifier"  # the text family has no Transformers classifier class to be
EXPECTED = {name: {"train": "works", "export head": "works", "export retrieval": "works", "export hf_seq_cls": SEQ_CLS_NEEDS_VLM,
                   "predict": "works", "serve": "works", "evaluate export": "works", "cv_report": "works"} for name in FIXTURES}  # fmt: skip
EXPECTED["memebridge"]["export retrieval"] = RETRIEVAL_NEEDS_BINARY  # sentiment and emotion are not binary heads


def _command(*args: str) -> subprocess.CompletedProcess:
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    return run_python([sys.executable, *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=scaled(600))


@pytest.fixture(scope="module")
def synthetic_shards(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic memes converted once (by a training's prepare step), for `data=shards`."""
    runner = TrainRun(data_dir, tmp_path_factory.mktemp("prepare"))
    runner(*SMALL_DATA, "debug=fdr", "print_table=false")
    # the session's data folder may hold other synthetic datasets (other tests' sizes): the one of SMALL_DATA's size
    groups = int(next(o for o in SMALL_DATA if o.startswith("data.source.num_groups=")).split("=")[1])
    (manifest,) = [
        path
        for path in (data_dir / "shards").glob("synthetic-*/manifest.json")
        if json.loads(path.read_text())["params"]["num_groups"] == groups
    ]
    return manifest.parent


def _run_dir(log_dir: Path) -> Path:
    (run,) = log_dir.glob("*/runs/*")
    return run


def _cells(name: str, root: Path, data_dir: Path, shards: Path) -> tuple[dict[str, str], dict]:
    """Every job on one dataset: {job: "works" or the refusal}, and what the checks below need."""
    from crossmod.artifacts.culture_folders import export_culture
    from crossmod.artifacts.loading import load
    from crossmod.artifacts.seq_cls_export import export_seq_cls
    from crossmod.data.predict_inputs import read_inputs
    from crossmod.reports.cv import report
    from crossmod.serving.cultures import ServedCultures

    fixture, culture = FIXTURES[name]
    data = [f"data={name}", *fixture(root, shards)]
    cells, facts = {}, {}
    runner = TrainRun(data_dir, root / "runs")
    trained = runner(*data, *TRAIN, check=False, timeout=600)
    cells["train"] = "works" if trained.returncode == 0 else f"refused: {trained.stderr[-300:]}"
    run = _run_dir(runner.log_dir)
    model, info = load(run)
    for kind in ("head", "retrieval"):
        try:
            export_culture(model, info, run, culture, root / kind / culture, kind=kind)
            cells[f"export {kind}"] = "works"
        except ValueError as error:  # crossmod's refusal, by name
            cells[f"export {kind}"] = f"refused: {error}"
            assert not (root / kind / culture).exists() and not list((root / kind).glob(".*partial*"))  # nothing half-written
    export = root / "head" / culture
    manifest = json.loads((run / "manifest.json").read_text())
    shard_folder = data_dir / "shards" / f"{manifest['dataset']}-{manifest['fingerprint']}"  # where data=<name> converted to
    facts.update(run=run, export=export, culture=culture, shards=shard_folder)
    try:
        export_seq_cls(model, info, run, root / "hf_seq_cls")
        cells["export hf_seq_cls"] = "works"
    except ValueError as error:  # ExportError: the family has no Transformers classifier folder
        cells["export hf_seq_cls"] = f"refused: {error}"
    predicted = _command(str(ROOT / "predict.py"), f"adapters={export}", f"inputs={shard_folder}", f"out={root / 'predictions.csv'}")
    cells["predict"] = "works" if predicted.returncode == 0 else f"refused: {predicted.stderr[-300:]}"
    try:  # what crossmod serve's worker answers with (src/crossmod/serving/cultures.py), in this process
        facts["served"] = ServedCultures.load([str(export)]).rows(list(read_inputs(shard_folder)))
        cells["serve"] = "works"
    except ValueError as error:
        cells["serve"] = f"refused: {error}"
    evaluated = _command(str(ROOT / "evaluate.py"), f"ckpt={export}", *data, f"paths.data_dir={data_dir}", f"out={root / 'report'}")
    cells["evaluate export"] = "works" if evaluated.returncode == 0 else f"refused: {evaluated.stderr[-300:]}"
    try:
        reports = report(runner.log_dir, root / "cv_report")
        cells["cv_report"] = "works" if reports else "refused: no fold results"
    except ValueError as error:
        cells["cv_report"] = f"refused: {error}"
    return cells, facts


@pytest.fixture(scope="module")
def matrix(data_dir: Path, synthetic_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    return {name: _cells(name, tmp_path_factory.mktemp(name), data_dir, synthetic_shards) for name in FIXTURES}


def test_every_dataset_goes_through_every_job_or_is_refused_by_name(matrix):
    for name, (cells, _) in matrix.items():
        for job, expected in EXPECTED[name].items():
            if expected == "works":
                assert cells[job] == "works", f"{name} × {job}: {cells[job]}"
            else:
                assert cells[job].startswith("refused") and expected in cells[job], f"{name} × {job}: {cells[job]}"


@pytest.mark.parametrize("name", list(FIXTURES))
def test_the_export_scores_the_runs_held_out_fold_with_the_runs_numbers(matrix, name):
    """evaluate.py on the export (split=auto): exactly the run's held-out fold, nothing it trained or chose on, the
    run's own test numbers; predict.py gives the same probabilities as the run's test stage."""
    _, facts = matrix[name]
    run, culture, root = facts["run"], facts["culture"], facts["export"].parents[1]
    (entry,) = json.loads((root / "report" / "report.json").read_text())["runs"].values()
    assert entry["split"]["scored"] == "held-out fold 0 of 2" and entry["split"]["trained_on"] == entry["split"]["selected_on"] == 0
    metrics = json.loads((run / "metrics.json").read_text())
    for metric, value in metrics["best"]["test"][culture].items():
        if isinstance(value, float) and value == value:
            # The text family gives memes with one caption one score; batched otherwise, their scores differ in the last
            # bit (≤ 6e-8 measured) and such ties may break the other way: AUROC moves by a few pairs, nothing else.
            tolerance = 2e-3 if metric == "auroc" else 1e-5
            assert entry["metrics"][culture][metric] == pytest.approx(value, abs=tolerance), metric
    with open(run / "predictions" / "test.csv") as handle:
        tested = {r["id"]: json.loads(r["probability"]) for r in csv.DictReader(handle) if r["head"] == culture}
    with open(root / "predictions.csv") as handle:
        rows = list(csv.DictReader(handle))
    if f"{culture}_probability" in rows[0]:  # a binary head; predict.py writes a class head's scores otherwise
        predicted = {r["id"]: float(r[f"{culture}_probability"]) for r in rows}
        assert tested and max(abs(predicted[i] - p) for i, p in tested.items()) < 1e-5


@pytest.mark.parametrize("name", list(FIXTURES))
def test_serving_answers_every_dataset_as_predict_does(matrix, name):
    """The rows crossmod serve answers with are predict.py's rows for the same memes: binary and class heads alike."""
    cells, facts = matrix[name]
    culture = facts["culture"]
    with open(facts["export"].parents[1] / "predictions.csv") as handle:
        predicted = {row["id"]: row for row in csv.DictReader(handle)}
    served = {row["id"]: row for row in facts["served"]}
    assert served.keys() == predicted.keys() and served
    for meme, row in served.items():
        if f"{culture}_probability" in row:
            assert row[f"{culture}_probability"] == pytest.approx(float(predicted[meme][f"{culture}_probability"]), abs=1e-5)
            assert row[f"{culture}_decision"] == int(predicted[meme][f"{culture}_decision"])
        else:
            assert row[f"{culture}_probabilities"] == pytest.approx(json.loads(predicted[meme][f"{culture}_probabilities"]), abs=1e-5)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_every_dataset_run_stands_beside_its_baselines(matrix, name):
    """Each dataset's run measured the majority and TF-IDF baselines on its own training, selection and held-out memes
    (the same counts as the run's stages), and the CV report shows them beside the model's held-out AUROC."""
    _, facts = matrix[name]
    run = facts["run"]
    metrics = json.loads((run / "metrics.json").read_text())
    baselines = metrics["baselines"]
    assert set(baselines["rows"]) == {"majority", "tfidf"}, baselines["rows"].keys()  # the tiny random encoder has no probe
    heads = set(metrics["best"]["test"]) - {"mean", "all"}
    for kind, row in baselines["rows"].items():
        assert set(row["test"]) - {"mean"} == heads, kind
        assert row["rule"] and row["name"]
    assert baselines["memes"]["test"] > 0 and baselines["memes"]["train"] > 0
    assert baselines["caption_tokens"]["captions"] == sum(baselines["memes"].values())
    fold_result = json.loads((run / "fold_result.json").read_text())
    assert set(fold_result["baselines"]) == {"majority", "tfidf"}
    (report_md,) = (facts["export"].parents[1] / "cv_report").glob("*/cv_report.md")
    text = report_md.read_text()
    assert "beside the baselines" in text and "| head | model | majority | TF-IDF+LR | model − best baseline |" in text


@pytest.mark.parametrize("name", [n for n in FIXTURES if EXPECTED[n]["export retrieval"] == "works"])
def test_retrieval_db_refuses_the_runs_held_out_and_selection_memes(matrix, name):
    """Adding the dataset's whole shards to the run's retrieval export is refused, naming exactly the run's held-out
    and selection memes (by id): also on the releases without a split column (Multi3Hate, MHC), whose memes sit in
    the shards' `all` split while their records carry no split."""
    from crossmod.artifacts.retrieval_db import DatabaseError, add, unseen_by_the_run
    from crossmod.data.predict_inputs import read_inputs

    _, facts = matrix[name]
    run, culture, shards = facts["run"], facts["culture"], facts["shards"]
    folder = facts["export"].parents[1] / "retrieval" / culture
    scored = set()
    for stage in ("test", "val"):
        with open(run / "predictions" / f"{stage}.csv") as handle:
            scored |= {r["id"] for r in csv.DictReader(handle) if r["head"] == culture and json.loads(r["label"]) in (0, 1)}
    card = json.loads((folder / "culture_card.json").read_text())
    records = [r for r in read_inputs(str(shards)) if (r.get("labels") or {}).get(culture) in (0, 1)]
    assert set(unseen_by_the_run(folder, card, records, str(shards))) == scored
    with pytest.raises(DatabaseError, match="held out or chosen on"):
        add(folder, str(shards), None, skip_existing=True)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_evaluate_puts_the_runs_baselines_beside_its_held_out_numbers(matrix, name):
    """Scoring a run folder on its held-out memes (split=auto) carries the baselines it measured on those memes into
    the report, and summary.md shows them beside the model's AUROC; on other memes (split=all) it carries none."""
    from crossmod.evaluation.run_report import summary_markdown
    from crossmod.results.scored_splits import run_facts, scored_splits

    _, facts = matrix[name]
    run = facts["run"]
    metrics = json.loads((run / "metrics.json").read_text())
    (scored,) = scored_splits(run_facts(run), "auto", facts["shards"], ["test"]).values()
    assert scored.baselines is not None and set(scored.baselines) == set(metrics["baselines"]["rows"])
    assert scored.baselines["tfidf"]["test"] == metrics["baselines"]["rows"]["tfidf"]["test"]
    (everything,) = scored_splits(run_facts(run), "all", facts["shards"], ["test"]).values()
    assert everything.baselines is None
    # split=all counts the run's selection memes as chosen on (also the inner split of a release without a split column)
    with open(run / "predictions" / "val.csv") as handle:
        selection = {r["id"] for r in csv.DictReader(handle)}
    assert everything.selected_on == len(selection) > 0, (everything.selected_on, len(selection))
    scores = {  # metrics.json writes NaN as null; the report's own scores are floats
        head: {k: float("nan") if v is None else v for k, v in s.items()}
        for head, s in metrics["best"]["test"].items()
        if isinstance(s, dict) and "auroc" in s
    }
    entry = {"split": scored.describe(), "selection": scored.selection, "metrics": scores, "baselines": scored.baselines}
    text = summary_markdown({"dataset": name, "items": len(scored.records), "runs": {"run": entry}}, [])
    assert "| head | AUROC | acc | F1 | majority AUROC | TF-IDF+LR AUROC |" in text


@pytest.mark.parametrize("name", [n for n in FIXTURES if EXPECTED[n]["export retrieval"] == "works"])
def test_a_retrieval_exports_card_reports_its_own_vote_not_the_runs_head(matrix, name):
    """A retrieval export scores by its database's vote, so its card and README report what that vote scores on the
    run's held-out memes (what the loaded folder scores there, as evaluate.py split=auto scores it); the run's head
    numbers stay beside them, named."""
    from crossmod.artifacts.loading import load
    from crossmod.evaluation.metrics import head_scores
    from crossmod.inference.scoring import probabilities, single_device_trainer
    from crossmod.results.scored_splits import run_facts, scored_splits

    _, facts = matrix[name]
    run, culture = facts["run"], facts["culture"]
    folder = facts["export"].parents[1] / "retrieval" / culture
    card = json.loads((folder / "culture_card.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert card["run_metrics"]["scored_by"] == "head" and card["run_metrics"]["test"] == metrics["best"]["test"][culture]
    assert card["scored_by"].startswith("this folder's retrieval vote (k=20, rank weighting)")
    model, _ = load(folder)
    (scored,) = scored_splits(run_facts(folder), "auto", facts["shards"], ["test"]).values()
    probs = probabilities(single_device_trainer(), model, scored.records, 8)
    head = model.heads[culture]
    target = head.labels([r["labels"].get(culture) for r in scored.records])
    voted = head_scores(torch.tensor([p[culture][0] for p in probs]), target, head)
    for metric in ("auroc", "acc"):
        if voted[metric] == voted[metric]:
            assert card["metrics"]["test"][metric] == pytest.approx(voted[metric], abs=1e-6), metric
    readme = (folder / "README.md").read_text()
    assert "Scored by this folder's retrieval vote" in readme and "The run's own scores (head rule" in readme

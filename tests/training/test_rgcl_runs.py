"""RGCL training and retrieval classification through the entry points users run.

One fold run trains with RGCL and scores its held-out fold by retrieval; it is exported as a retrieval culture
adapter, which must hold the run's training memes only, score on another folder exactly as the run scored, name
each decision's neighbours, and take new labelled memes without retraining.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from crossmod.artifacts.retrieval_db import IDS_FILE
from crossmod.data.predict_inputs import read_inputs
from crossmod.data.sample import Sample
from crossmod.data.shards import write_shards
from tests.artifacts.test_export_predict import _shard_dir
from tests.conftest import ROOT, SMALL_DATA, TrainRun, scaled
from tests.zygote import run_python

RGCL = ("fold=0", "num_folds=3", "trainer.max_epochs=2", "model/objective=rgcl", "model/scoring=retrieval")
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return run_python([sys.executable, *args], cwd=ROOT, env=OFFLINE, capture_output=True, text=True, timeout=scaled(600))


@pytest.fixture(scope="module")
def rgcl_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fold run, and its US retrieval export moved to a folder of its own (nothing left where it was written)."""
    root = tmp_path_factory.mktemp("rgcl")
    runner = TrainRun(data_dir, root / "runs")
    runner(*SMALL_DATA, *RGCL, "print_table=false", env={"CROSSMOD_RUN_ID": "rgcl"})
    run = root / "runs" / "synthetic_concat-retrieval-rgcl" / "runs" / "rgcl"  # the label names scoring mode and RGCL
    exported = _run("export.py", f"run={run}", "culture=US", "kind=retrieval", f"out={root / 'export'}")
    assert exported.returncode == 0, exported.stderr[-4000:]
    adapter = Path(shutil.move(root / "export" / "US", root / "elsewhere" / "US"))
    return {"run": run, "adapter": adapter, "root": root}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _held_out(run: Path) -> dict[str, float]:
    with open(run / "predictions" / "test.csv") as handle:
        return {r["id"]: float(r["probability"]) for r in csv.DictReader(handle) if r["head"] == "US"}


def test_a_fold_run_trains_with_rgcl_and_scores_by_retrieval(rgcl_run):
    run = rgcl_run["run"]
    with open(run / "csv" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    logged = [(float(r["train/rgcl"]), float(r["train/cross_entropy"]), float(r["train/loss"])) for r in rows if r.get("train/rgcl")]
    assert logged and all(math.isfinite(v) for row in logged for v in row)
    assert all(abs(total - (0.5 * ce + 0.5 * rgcl)) < 1e-5 for rgcl, ce, total in logged)  # (1 - w)·CE + w·RGCL
    held_out = _held_out(run)
    assert held_out and all(0.0 < p < 1.0 for p in held_out.values())  # sigmoid of a vote in [-1, 1]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["best"]["test"]["mean"]["auroc"] == metrics["best"]["test"]["mean"]["auroc"]  # measured, not NaN
    # the run's name says how it was trained and scored, wherever its numbers go
    assert metrics["experiment"] == "synthetic_concat-retrieval-rgcl" and metrics["variants"] == ["retrieval", "rgcl"]
    assert json.loads((run / "fold_result.json").read_text())["experiment"] == metrics["experiment"]


def test_the_retrieval_database_of_a_fold_run_holds_its_training_memes_only(rgcl_run):
    """No held-out meme and no inner-validation meme; every training meme with a US label, once."""
    run, adapter = rgcl_run["run"], rgcl_run["adapter"]
    ids = json.loads((adapter / IDS_FILE).read_text())
    held_out = set(_held_out(run))
    with open(run / "predictions" / "val.csv") as handle:
        selection = {r["id"] for r in csv.DictReader(handle)}
    assert held_out and selection and not (set(ids) & held_out) and not (set(ids) & selection)
    everything = read_inputs(_shard_dir(run), ["train", "val"])
    training = {r["id"] for r in everything if r["id"] not in held_out | selection and r["labels"].get("US") in (0, 1)}
    assert sorted(ids) == sorted(training)
    card = json.loads((adapter / "culture_card.json").read_text())
    assert card["kind"] == "retrieval" and card["retrieval"]["size"] == len(ids) and card["retrieval"]["k"] == 20
    # the run scored by this very vote over these memes: the card's own numbers are the run's
    assert card["run_metrics"]["scored_by"] == "retrieval"
    for stage in ("val", "test"):
        for metric in ("auroc", "acc"):
            assert card["metrics"][stage][metric] == pytest.approx(card["run_metrics"][stage][metric], abs=1e-6), (stage, metric)


def test_the_moved_retrieval_adapter_scores_as_the_run_did_and_names_its_neighbours(rgcl_run, tmp_path):
    """On another folder, offline: the held-out fold's P(hate) equals the run's own test scores, and each meme's
    explanation lists the k voters, nearest first, none of them the meme itself."""
    run, adapter = rgcl_run["run"], rgcl_run["adapter"]
    out = tmp_path / "preds.jsonl"
    result = _run("predict.py", f"adapters={adapter}", f"inputs={_shard_dir(run)}", "splits=[train,val]", f"out={out}")
    assert result.returncode == 0, result.stderr[-4000:]
    rows = {r["id"]: r for r in _rows(out)}
    held_out = _held_out(run)
    assert max(abs(rows[i]["US_probability"] - p) for i, p in held_out.items()) < 1e-5
    bank = set(json.loads((adapter / IDS_FILE).read_text()))
    for meme_id, row in rows.items():
        similarities = row["US_neighbour_similarities"]
        assert len(row["US_neighbours"]) == 20 and meme_id not in row["US_neighbours"] and set(row["US_neighbours"]) <= bank
        assert similarities == sorted(similarities, reverse=True) and set(row["US_neighbour_labels"]) <= {0, 1}


def test_evaluate_scores_a_retrieval_run_by_its_training_memes_as_its_test_stage_did(rgcl_run, data_dir, tmp_path):
    """evaluate.py on the run dir: the database is rebuilt from the run's training folds under its selected weights, and
    the held-out fold (split=auto) gets the run's own test scores."""
    run = rgcl_run["run"]
    result = _run("evaluate.py", f"ckpt={run}", f"paths.data_dir={data_dir}", *SMALL_DATA, f"out={tmp_path / 'report'}")
    assert result.returncode == 0, result.stderr[-4000:]
    with open(tmp_path / "report" / "predictions" / "rgcl.csv") as handle:
        rows = {r["id"]: r for r in csv.DictReader(handle)}
    held_out = _held_out(run)
    assert set(rows) == set(held_out)
    assert max(abs(float(rows[i]["US_probability"]) - p) for i, p in held_out.items()) < 1e-5


def test_a_runs_config_cannot_choose_where_evaluate_writes(rgcl_run, data_dir, tmp_path):
    """A shared retrieval run whose config.yaml points data.shard_root at someone's folder: evaluate.py reads the run's
    training memes from there, never converts, locks or writes there; it stops naming the folder."""
    run = Path(shutil.copytree(rgcl_run["run"], tmp_path / "shared" / "rgcl"))
    victim = tmp_path / "victim"
    victim.mkdir()
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("shard_root: ", f"shard_root: {victim} #", 1))
    result = _run("evaluate.py", f"ckpt={run}", f"paths.data_dir={data_dir}", *SMALL_DATA, f"out={tmp_path / 'report'}")
    assert result.returncode == 1 and "are not on this machine" in result.stderr and str(victim) in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and list(victim.iterdir()) == []


def _near_duplicates(records: list[dict], folder: Path) -> Path:
    """Each meme again under a new id, its image one pixel different (what a re-upload looks like)."""
    folder.mkdir()
    lines = []
    for record in records:
        image = Image.open(io.BytesIO(record["image"])).convert("RGB")
        image.putpixel((0, 0), tuple(255 - c for c in image.getpixel((0, 0))))
        name = record["id"].replace("/", "_") + ".png"
        image.save(folder / name)
        lines.append(json.dumps({"id": f"dup/{record['id']}", "text": record["text"], "image": name, "lang": record["lang"]}))
    (folder / "memes.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "memes.jsonl"


def test_adding_labelled_memes_decides_their_near_duplicates(rgcl_run, tmp_path):
    """`crossmod retrieval-db` puts the dataset's test memes (never in the run) into a copy of the adapter; with k=1
    each near duplicate is then decided by its original, whatever the adapter decided before."""
    run = rgcl_run["run"]
    adapter = Path(shutil.copytree(rgcl_run["adapter"], tmp_path / "US"))
    shards = _shard_dir(run)
    originals = [r for r in read_inputs(shards, ["test"]) if r["lang"] == "en"]
    duplicates = _near_duplicates(originals, tmp_path / "dups")

    def predict(name: str) -> dict[str, dict]:
        result = _run("predict.py", f"adapters={adapter}", f"inputs={duplicates}", "k=1", f"out={tmp_path / name}")
        assert result.returncode == 0, result.stderr[-4000:]
        return {r["id"]: r for r in _rows(tmp_path / name)}

    before = predict("before.jsonl")
    size = json.loads((adapter / "culture_card.json").read_text())["retrieval"]["size"]
    added = _run("-m", "crossmod.recipes.retrieval_db", f"adapter={adapter}", f"shards={shards}", "splits=[test]")
    assert added.returncode == 0, added.stderr[-4000:]
    tests = read_inputs(shards, ["test"])
    assert f"{len(tests)} added" in added.stdout
    card = json.loads((adapter / "culture_card.json").read_text())
    assert card["retrieval"]["size"] == size + len(tests) and card["retrieval"]["sources"][-1]["memes"] == len(tests)
    after = predict("after.jsonl")
    for original in originals:
        row = after[f"dup/{original['id']}"]
        assert row["US_neighbours"] == [original["id"]] and row["US_neighbour_similarities"][0] > 0.99
        assert row["US_decision"] == original["labels"]["US"]
        assert before[f"dup/{original['id']}"]["US_neighbours"] != [original["id"]]  # not in the database before
    again = _run("-m", "crossmod.recipes.retrieval_db", f"adapter={adapter}", f"shards={shards}", "splits=[test]")
    assert again.returncode == 1 and "already in" in again.stderr and "skip_existing=true" in again.stderr


def test_adding_the_runs_held_out_or_selection_memes_is_refused_unless_asked(rgcl_run, tmp_path):
    """The shards' train split holds fold 0 (held out by the run) and its val split is what the run selected on: both
    refused by count and flag, the database untouched; allow_held_out=true adds them and the card says how many."""
    adapter = Path(shutil.copytree(rgcl_run["adapter"], tmp_path / "US"))
    shards = _shard_dir(rgcl_run["run"])
    before = (adapter / "retrieval_db.safetensors").read_bytes()
    held_out = set(_held_out(rgcl_run["run"]))
    for split in ("train", "val"):
        refused = _run(
            "-m", "crossmod.recipes.retrieval_db", f"adapter={adapter}", f"shards={shards}", f"splits=[{split}]", "skip_existing=true"
        )
        assert refused.returncode == 1 and "held out or chosen on by the run" in refused.stderr, refused.stderr[-3000:]
        assert "allow_held_out=true" in refused.stderr and (adapter / "retrieval_db.safetensors").read_bytes() == before
    count = int(re.search(r"(\d+) of these memes were held out", refused.stderr)[1])
    assert count == len([r for r in read_inputs(shards, ["val"]) if r["labels"].get("US") in (0, 1)])
    allowed = _run(
        "-m",
        "crossmod.recipes.retrieval_db",
        f"adapter={adapter}",
        f"shards={shards}",
        "splits=[train]",
        "skip_existing=true",
        "allow_held_out=true",
    )
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    source = json.loads((adapter / "culture_card.json").read_text())["retrieval"]["sources"][-1]
    labelled_held_out = [r for r in read_inputs(shards, ["train"]) if r["id"] in held_out and r["labels"].get("US") in (0, 1)]
    assert source["held_out_or_selection_memes"] == len(labelled_held_out) > 0
    assert source["from"] == Path(shards).name and source["dataset"] == "synthetic"  # no path of this machine in a shared card


def _copies_under_new_ids(records: list[dict], out: Path, heads: dict) -> Path:
    """The memes again as another dataset's shards: new ids, images enlarged and re-encoded as JPEG, texts re-cased and
    re-spaced (what a re-upload collected elsewhere looks like)."""

    def reencoded(image: bytes) -> bytes:
        picture = Image.open(io.BytesIO(image)).convert("RGB")
        picture = picture.resize((picture.width * 3 // 2, picture.height * 3 // 2))
        buffer = io.BytesIO()
        picture.save(buffer, "JPEG", quality=70)
        return buffer.getvalue()

    copies = [
        Sample(
            f"copy-{i}",
            f"copy-{i}",
            r["lang"],
            "  " + r["text"].upper().replace(" ", "   ") + "!",
            reencoded(r["image"]),
            r["labels"],
            "train",
        )
        for i, r in enumerate(records)
    ]
    write_shards(copies, out, dataset="elsewhere", heads=heads, params={"copied": True})
    return out


def test_copies_of_held_out_memes_under_other_ids_are_refused_by_content(rgcl_run, tmp_path):
    """The export keeps content keys of the memes its run held out or selected on: copies under new ids, in another
    dataset's shards, are refused like the originals; unrelated memes in the same shards are not the reason."""
    adapter = Path(shutil.copytree(rgcl_run["adapter"], tmp_path / "US"))
    card = json.loads((adapter / "culture_card.json").read_text())
    shards = _shard_dir(rgcl_run["run"])
    manifest = json.loads((shards / "manifest.json").read_text())
    held_out = set(_held_out(rgcl_run["run"]))
    train = [r for r in read_inputs(shards, ["train"]) if r["labels"].get("US") in (0, 1)]
    assert card["retrieval"]["unseen"]["memes"] >= len(held_out & {r["id"] for r in train}) > 0
    copied = [r for r in train if r["id"] in held_out][:5]
    before = (adapter / "retrieval_db.safetensors").read_bytes()
    refused = _run(
        "-m",
        "crossmod.recipes.retrieval_db",
        f"adapter={adapter}",
        f"shards={_copies_under_new_ids(copied, tmp_path / 'copies', manifest['heads'])}",
    )
    assert refused.returncode == 1 and "5 copies under other ids by content" in refused.stderr, refused.stderr[-3000:]
    assert (adapter / "retrieval_db.safetensors").read_bytes() == before
    # memes the run trained on, copied the same way, are no held-out memes: added
    trained = [r for r in train if r["id"] not in held_out][:5]
    added = _run(
        "-m",
        "crossmod.recipes.retrieval_db",
        f"adapter={adapter}",
        f"shards={_copies_under_new_ids(trained, tmp_path / 'others', manifest['heads'])}",
    )
    assert added.returncode == 0 and "5 added" in added.stdout, added.stderr[-3000:]


def test_a_run_written_with_the_older_flags_loads_as_the_components_it_chose(rgcl_run, tmp_path):
    """A run (config.yaml) and a checkpoint (hyperparameters) from before the objective and the scoring rule were
    components name them as `rgcl: {…}` and `classify: retrieval`: they load as RGCL and the vote, never as the defaults."""
    import torch
    import yaml

    from crossmod.artifacts.loading import load
    from crossmod.models.objectives import RGCL as RGCLObjective
    from crossmod.models.scoring_rules import RetrievalVote

    old = Path(shutil.copytree(rgcl_run["run"], tmp_path / "old"))
    config = yaml.safe_load((old / "config.yaml").read_text())
    objective = config["model"].pop("objective")
    assert config["model"].pop("scoring")["_target_"].endswith("RetrievalVote")
    config["model"].update(rgcl={k: v for k, v in objective.items() if k != "_target_"}, classify="retrieval")
    (old / "config.yaml").write_text(yaml.safe_dump(config))
    for path in (old / "checkpoints").glob("*.ckpt"):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        hparams = checkpoint["hyper_parameters"]
        hparams["rgcl"] = {k: v for k, v in hparams.pop("objective").items() if k != "_target_"}
        hparams.pop("scoring")
        hparams["classify"] = "retrieval"
        torch.save(checkpoint, path)
    model, _ = load(old)
    assert model.objective == RGCLObjective(weight=0.5, loss="nll") and model.scoring == RetrievalVote({"k": 20, "weighting": "rank"})
    assert "rgcl" not in model.hparams and model.hparams.scoring["_target_"].endswith("RetrievalVote")


def test_rgcl_settings_that_cannot_work_are_refused_naming_the_key(train_run):
    result = train_run(*SMALL_DATA, "model/objective=rgcl", "model.objective.weight=2", check=False)
    assert result.returncode != 0 and "model.objective.weight must be in (0, 1]" in result.stderr + result.stdout
    assert "Run directory" not in result.stdout  # refused before a run folder exists
    result = train_run(*SMALL_DATA, "+model.retrieval={k: 0}", check=False)
    assert result.returncode != 0 and "model.retrieval" in result.stderr + result.stdout
    result = train_run(*SMALL_DATA, "model=late_fusion", "model/scoring=retrieval", "trainer.max_epochs=1", check=False)
    assert result.returncode != 0 and "no shared meme embedding" in result.stderr + result.stdout


def test_the_side_by_side_table_scores_a_runs_predictions_as_scikit_learn_does(rgcl_run):
    """scripts/retrieval_table.py: per culture AUROC and accuracy equal scikit-learn's on the run's test predictions, and
    the synthetic memes' confounder pairs are found and counted."""
    from sklearn.metrics import accuracy_score, roc_auc_score

    from scripts.retrieval_table import render, scores

    run = rgcl_run["run"]
    measured = scores(run)
    with open(run / "predictions" / "test.csv") as handle:
        rows = list(csv.DictReader(handle))
    for head, entry in measured.items():
        mine = [r for r in rows if r["head"] == head]
        labels, probabilities = [int(float(r["label"])) for r in mine], [float(r["probability"]) for r in mine]
        assert entry["auroc"] == pytest.approx(roc_auc_score(labels, probabilities), abs=1e-12)
        assert entry["acc"] == pytest.approx(accuracy_score(labels, [int(p >= 0.5) for p in probabilities]), abs=1e-12)
        assert entry["flip_pairs"]["pairs"] == entry["flip_pairs_text"]["pairs"] + entry["flip_pairs_image"]["pairs"]
    assert sum(entry["flip_pairs"]["pairs"] for entry in measured.values()) > 0
    results = {
        "epochs": 2,
        "seed": 1,
        "machine": "here",
        "rows": [
            {
                "dataset": "synthetic",
                "variant": "RGCL + retrieval",
                "command": "python train.py",
                "selection": {"rule": "inner"},
                "scores": measured,
            }
        ],
    }
    table = render(results)
    assert "| RGCL + retrieval |" in table and "Selection (`inner`)" in table

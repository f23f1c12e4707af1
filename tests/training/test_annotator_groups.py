"""`model/objective=annotator_groups`: a head per annotator (or annotator group) within each culture, Davani et al.'s
multi-task model, on Multi3Hate's votes in the release's layout: the converter's groups, the layer's aggregation and
loss by hand, a fold run that scores it like any model, and an export that loads back with the culture's groups."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from crossmod.data.heads import Head, group_counts, group_votes
from crossmod.data.sources.multi3hate import Multi3HateSource
from crossmod.models.heads import GroupHeadLayers
from crossmod.models.objectives import AnnotatorGroups
from tests.conftest import ROOT, scaled
from tests.data.sources import layouts
from tests.zygote import run_python

CULTURES = ("US", "DE", "MX", "IN", "CN")


def _cli(script: str, *args: str) -> None:
    done = run_python([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=scaled(600))
    assert done.returncode == 0, done.stderr[-4000:]


def _shard_dir(run_dir: Path) -> Path:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    config = (run_dir / "config.yaml").read_text()
    shard_root = Path(next(line.split(": ", 1)[1] for line in config.splitlines() if line.strip().startswith("shard_root:")))
    return shard_root / f"{manifest['dataset']}-{manifest['fingerprint']}"


def test_the_converter_groups_each_cultures_votes_by_annotator_and_attribute(tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw", memes=2)
    first = next(s for s in Multi3HateSource(raw).records() if getattr(s, "id", None) == "multi3hate/10/en")
    groups = first.meta["group_votes"]["US"]
    # meme 10, annotators en-user0..2 vote (10 + u) % 2 → 0, 1, 0; users 0 and 2 are female (layouts.M3H_ANNOTATOR)
    assert groups["annotator=en-user1"] == [1, 1] and groups["annotator=en-user0"] == [0, 1]
    assert groups["sex=Female"] == [0, 2] and groups["sex=Male"] == [1, 1]
    assert groups["age=30s"] == [0, 1] and groups["age=20s"] == [1, 1] and groups["age=40s"] == [0, 1]
    assert "party=" not in groups and groups["party=Independent"] == [0, 1]  # user 2 left the party empty
    stats = Multi3HateSource(raw).raw_votes["stats"]
    assert stats["votes_without_group"] == {"party": 2 * 5}  # one such vote per meme and pool: counted, not grouped


def test_a_group_value_is_data_never_a_config_interpolation(tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw", memes=1)
    path = raw / "raw_annotations.csv"
    rows = list(csv.reader(path.open(encoding="utf-8")))
    sex = rows[0].index("Sex")
    rows[1][sex] = "${oc.env:WANDB_API_KEY}"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    (sample,) = [s for s in Multi3HateSource(raw).records() if getattr(s, "id", None) == "multi3hate/10/en"]
    keys = [k for groups in sample.meta["group_votes"].values() for k in groups]
    assert "sex=__oc.env_WANDB_API_KEY_" in keys and not any(c in "".join(keys) for c in "${}'\"")


def test_each_cultures_probability_is_the_mean_of_its_groups_and_the_loss_is_every_votes_cross_entropy():
    heads = {"US": Head("US", "binary"), "DE": Head("DE", "binary")}
    groups = ["DE|sex=Female", "US|sex=Female", "US|sex=Male"]
    layers = GroupHeadLayers(3, heads, groups)
    with torch.no_grad():
        layers.linear.weight.copy_(torch.eye(3))
        layers.linear.bias.zero_()
    features = torch.tensor([[0.5, 1.0, -2.0], [0.0, 0.0, 3.0]])
    logits = layers(features)
    us = (torch.sigmoid(features[:, 1]) + torch.sigmoid(features[:, 2])) / 2
    assert torch.allclose(torch.sigmoid(logits["US"]), us, atol=1e-6)
    assert torch.allclose(torch.sigmoid(logits["DE"]), torch.sigmoid(features[:, 0]), atol=1e-6)
    assert layers.rows("US") == [1, 2]

    # meme 0: US women 2 of 3 hateful, US men 0 of 1; meme 1: only DE women, 1 of 1
    features_of = [{"group_votes": {"US|sex=Female": [2, 3], "US|sex=Male": [0, 1]}}, {"group_votes": {"DE|sex=Female": [1, 1]}}]
    batch = {"group_votes": group_counts(features_of, groups)}
    assert batch["group_votes"][1].tolist() == [[1, 1], [0, 0], [0, 0]]  # meme 1: DE women only, zeros elsewhere

    class Model:
        def group_logits(self, _batch):
            return layers.group_logits(features)

    loss = AnnotatorGroups(by="sex", groups=tuple(groups))(Model(), batch)["train/loss"]
    z = features  # each vote's cross-entropy against its group's head, averaged over the 5 votes
    votes = [(z[0, 1], 1), (z[0, 1], 1), (z[0, 1], 0), (z[0, 2], 0), (z[1, 0], 1)]
    by_hand = sum(float(F.binary_cross_entropy_with_logits(logit, torch.tensor(float(y)))) for logit, y in votes) / 5
    assert float(loss.detach()) == pytest.approx(by_hand, rel=1e-6)
    assert group_votes({"meta": {"group_votes": {"US": {"sex=Male": [0, 1], "age=30s": [1, 1]}}}}, "sex") == {"US|sex=Male": [0, 1]}


def test_a_culture_without_groups_is_refused_by_name():
    with pytest.raises(ValueError, match=r"\['DE'\]"):
        GroupHeadLayers(3, {"US": Head("US", "binary"), "DE": Head("DE", "binary")}, ["US|sex=Male"])


def test_a_fold_run_trains_a_head_per_group_scores_its_cultures_and_exports_each_with_its_groups(train_run, tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw", memes=12)
    result = train_run(
        "data=multi3hate", f"data.raw_dir={raw}", "model=text", "model/objective=annotator_groups", "model.objective.by=sex",
        "fold=0", "num_folds=3", "trainer.max_epochs=2", env={"CROSSMOD_RUN_ID": "groups"},
    )  # fmt: skip
    (run,) = (tmp_path / "runs").glob("*/runs/groups")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["variants"] == ["annotator_groups"] and run.parent.parent.name == "multi3hate_text-annotator_groups"
    assert set(metrics["best"]["test"]) >= set(CULTURES) and "Against the annotators' votes" in result.stdout
    (checkpoint,) = (run / "checkpoints").glob("*.ckpt")  # the selected weights (a finished run keeps no last.ckpt)
    config = torch.load(checkpoint, map_location="cpu", weights_only=True)["hyper_parameters"]
    groups = config["objective"]["groups"]
    assert groups == sorted(groups) and {g.split("|")[0] for g in groups} == set(CULTURES)
    assert {g.split("|")[1] for g in groups} == {"sex=Female", "sex=Male"}  # the fixture's two sexes, in every culture
    # every culture's held-out probability is the mean of its group heads' (the checkpoint's weights, by hand)
    from crossmod.models.module import MemeClassifier

    model = MemeClassifier.load_from_checkpoint(checkpoint)
    model.configure_model()
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"])
    assert isinstance(model.head_layers, GroupHeadLayers) and model.head_layers.linear.out_features == len(groups)
    features = torch.randn(4, model.head_layers.linear.in_features)
    per_group = torch.sigmoid(model.head_layers.group_logits(features))
    us = [k for k, g in enumerate(groups) if g.startswith("US|")]
    assert torch.allclose(torch.sigmoid(model.head_layers(features)["US"]), per_group[:, us].mean(1), atol=1e-5)
    assert math.isfinite(metrics["votes"]["heads"]["US"]["model"]["cross_entropy"])

    # the DE export holds DE's group heads only, loads back and predicts the run's own held-out scores
    _cli("export.py", f"run={run}", "culture=DE", f"out={tmp_path / 'export'}")
    folder = tmp_path / "export" / "DE"
    assert json.loads((folder / "model_config.json").read_text())["objective"]["groups"] == [g for g in groups if g.startswith("DE|")]
    _cli("predict.py", f"adapters={folder}", f"inputs={_shard_dir(run)}", f"out={tmp_path / 'de.jsonl'}")
    predicted = {r["id"]: r["DE_probability"] for r in map(json.loads, open(tmp_path / "de.jsonl"))}
    tested = {r["id"]: float(r["probability"]) for r in csv.DictReader(open(run / "predictions" / "test.csv")) if r["head"] == "DE"}
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())

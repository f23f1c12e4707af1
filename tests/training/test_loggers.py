"""W&B writes real offline run files beside the CSV log, with the same numbers; secrets never reach saved configs."""

from __future__ import annotations

import csv
import json
import sys

import pytest

from crossmod.artifacts.runs import redact
from crossmod.training.wandb_offline import read_offline_run
from tests.conftest import ROOT, SMALL_DATA
from tests.zygote import run_python

HEADS = ("US", "DE", "MX", "IN", "CN")


def _csv_validations(run_dir) -> list[dict[str, float]]:
    rows = csv.DictReader(open(run_dir / "csv" / "metrics.csv"))
    return [{k: float(v) for k, v in row.items() if v != ""} for row in rows if row.get("val/mean/auroc")]


def test_wandb_offline_run_holds_per_culture_metrics_group_and_media(train_run):
    train_run("logger=wandb", "debug=limit", *SMALL_DATA, "fold=1", "num_folds=3", env={"CROSSMOD_RUN_ID": "wb"})
    (run_dir,) = train_run.run_dirs("synthetic_concat")
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, "expected one offline W&B run directory"
    run = read_offline_run(offline[0])

    assert run.run["group"] == "synthetic_concat-wb" and run.run["job_type"] == "fold1"
    assert run.config["fold"] == 1 and run.config["model"]["heads"]["US"] == {"kind": "binary"}  # resolved config

    # every validation of fit plus the best checkpoint's: the same numbers the CSV logger recorded
    wandb_vals = [row for row in run.history if "val/mean/auroc" in row]
    csv_vals = _csv_validations(run_dir)
    assert len(wandb_vals) == len(csv_vals) == 3
    for logged, recorded in zip(wandb_vals, csv_vals):
        for head in (*HEADS, "mean"):
            for metric in ("auroc", "acc", "f1"):
                key = f"val/{head}/{metric}"
                assert logged[key] == pytest.approx(recorded[key], abs=1e-6), key

    metrics = json.loads((run_dir / "metrics.json").read_text())
    for stage in ("val", "test"):
        for head in (*HEADS, "mean"):
            assert run.summary[f"best/{stage}/{head}/auroc"] == pytest.approx(metrics["best"][stage][head]["auroc"], abs=1e-6)
        for head in HEADS:
            assert any(f.startswith(f"media/images/roc/{stage}/{head}_") and f.endswith(".png") for f in run.files), (stage, head)
        table = next(row for row in run.history if f"predictions/{stage}/_type" in row)
        assert table[f"predictions/{stage}/_type"] == "table-file"
        assert table[f"predictions/{stage}/nrows"] == sum(1 for _ in open(run_dir / "predictions" / f"{stage}.csv")) - 1

    # the documented command prints the same summary
    printed = run_python(
        [sys.executable, "-m", "crossmod", "wandb-offline", f"run={offline[0]}", "part=summary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(printed.stdout)["best/test/mean/auroc"] == pytest.approx(run.summary["best/test/mean/auroc"])


def test_secret_looking_keys_are_redacted():
    plain = {"logger": {"wandb": {"api_key": "abc123", "project": "crossmod"}}, "hub_token": "hf_x", "list": [{"password": "p"}]}
    redacted = redact(plain)
    assert "abc123" not in str(redacted) and "hf_x" not in str(redacted) and "'p'" not in str(redacted)
    assert redacted["logger"]["wandb"]["project"] == "crossmod"


def test_redaction_keeps_tokenizers_and_token_counts():
    kept = redact({"tokenizer": "/models/bert", "max_new_tokens": 40, "hub_token": "hf_x", "WANDB_API_KEY": "k", "secret": "s"})
    assert kept["tokenizer"] == "/models/bert" and kept["max_new_tokens"] == 40
    assert kept["hub_token"] == kept["WANDB_API_KEY"] == kept["secret"] == "***"

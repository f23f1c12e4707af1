"""W&B writes real offline run files beside the CSV log; secrets never reach saved configs."""

from __future__ import annotations

from tests.conftest import SMALL_DATA
from training.runs import redact


def test_wandb_offline_run_files_and_csv(train_run):
    train_run("logger=wandb", "debug=limit", *SMALL_DATA, "fold=1", "num_folds=3")
    (run_dir,) = train_run.run_dirs("synthetic_concat")
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, "expected one offline W&B run directory"
    assert list(offline[0].glob("*.wandb")), "the offline run has no .wandb log file"
    assert (run_dir / "csv" / "metrics.csv").is_file()
    config = (run_dir / "config.yaml").read_text()
    assert "job_type: fold1" in config and "group: synthetic_concat" in config


def test_secret_looking_keys_are_redacted():
    plain = {"logger": {"wandb": {"api_key": "abc123", "project": "crossmod"}}, "hub_token": "hf_x", "list": [{"password": "p"}]}
    redacted = redact(plain)
    assert "abc123" not in str(redacted) and "hf_x" not in str(redacted) and "'p'" not in str(redacted)
    assert redacted["logger"]["wandb"]["project"] == "crossmod"

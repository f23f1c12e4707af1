"""Secrets typed as overrides (`+WANDB_API_KEY=…`, `+wandbApiKey=…`, `+accessToken=…`, `+auth=…`,
`+private_key=…`) end up nowhere in what a run writes: crossmod's files, Hydra's `.hydra/`, the
CSV logger's hparams.yaml, the offline W&B run (its config and recorded command line), a sweep's
multirun.yaml, and an export of the run. They are still counted: each override is recorded, redacted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crossmod.runtime.redaction import is_secret_key, redact
from crossmod.training.wandb_offline import read_offline_run
from tests.bad_input.conftest import SECRETS


def files_holding_secrets(root: Path, secrets: list[str]) -> dict[str, list[str]]:
    """{file under root: the secret values its bytes contain}, binary files (W&B's log) included."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits = [s for s in secrets if s.encode() in data]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def test_secret_overrides_reach_no_file_of_the_run(leaky_run, exported_culture):
    written = sorted(str(p.relative_to(leaky_run)) for p in leaky_run.rglob("*") if p.is_file())
    for expected in (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "config.yaml", "csv/hparams.yaml"):
        assert expected in written
    (wandb_run,) = leaky_run.glob("wandb/offline-run-*")
    assert list(wandb_run.glob("run-*.wandb")) and list(wandb_run.glob("logs/debug*.log"))

    assert files_holding_secrets(leaky_run, list(SECRETS.values())) == {}
    assert files_holding_secrets(exported_culture, list(SECRETS.values())) == {}

    overrides = yaml.safe_load((leaky_run / ".hydra" / "overrides.yaml").read_text())
    assert [o for o in overrides if o.split("=")[0] in SECRETS] == [f"{key}=***" for key in SECRETS]
    hydra = yaml.safe_load((leaky_run / ".hydra" / "hydra.yaml").read_text())["hydra"]
    assert "+auth=***" in hydra["job"]["override_dirname"] and "debug=limit" in hydra["job"]["override_dirname"]
    names = [key.lstrip("+") for key in SECRETS]
    for path in (".hydra/config.yaml", "config.yaml", "csv/hparams.yaml"):
        saved = yaml.safe_load((leaky_run / path).read_text())
        assert {name: saved[name] for name in names} == dict.fromkeys(names, "***"), path
    logged = read_offline_run(wandb_run)
    assert {name: logged.config[name] for name in names} == dict.fromkeys(names, "***")
    assert logged.config["model"]["preprocessor"]["tokenizer"]  # the rest of the config is intact


def test_a_sweep_leaves_no_secret_in_multirun_yaml_or_its_jobs(train_run):
    """A secret swept over (`choice(…)`): each job's chosen value on the launcher's line, the sweep's own dirname in
    multirun.yaml, and every job's files."""
    secrets = ["sweep-5ecret-0e6d52", "sweep-5ecret-7a1f09"]
    result = train_run(
        "-m",
        "debug=fdr",
        "data.source.num_groups=40",
        "data.samples_per_shard=64",
        "print_table=false",
        f"+hub_token=choice({','.join(secrets)})",
        env={"CROSSMOD_RUN_ID": "sweep"},
    )
    sweep = train_run.log_dir / "synthetic_concat" / "multiruns" / "sweep"
    assert (sweep / "multirun.yaml").is_file() and len(list(sweep.glob("*/.hydra/overrides.yaml"))) == 2
    assert files_holding_secrets(sweep, secrets) == {}
    assert not any(secret in result.stdout + result.stderr for secret in secrets)
    assert "#1 : " in result.stdout + result.stderr  # the launcher's line for the second job was printed, redacted
    assert "+hub_token=***" in (sweep / "multirun.yaml").read_text()


@pytest.mark.parametrize(
    "key",
    [
        "WANDB_API_KEY",
        "wandbApiKey",
        "accessToken",
        "auth",
        "private_key",
        "hub-token",
        "HFToken",
        "APIKey",
        "client_secret",
        "db.password",
    ],
)
def test_one_rule_covers_every_spelling(key):
    assert is_secret_key(key) and redact({key: "s", "nested": [{key: "s"}]}) == {key: "***", "nested": [{key: "***"}]}


@pytest.mark.parametrize("key", ["tokenizer", "max_new_tokens", "num_image_tokens", "author", "monitor", "exclude_keys", "image_processor"])
def test_the_rule_keeps_ordinary_keys(key):
    assert not is_secret_key(key) and redact({key: "v"}) == {key: "v"}

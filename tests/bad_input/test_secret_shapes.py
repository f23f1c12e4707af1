"""Secrets in the override shapes the first pass missed: a secret key inside a structured value
(`'+creds={api_key: …}'`), keys named `wandb_key` or `pwd`, and credentials inside a URL
(`https://user:secret@host`). A sweep is launched with all of them; no file Hydra or crossmod writes
under the sweep folder (multirun.yaml, each job's `.hydra/` and crossmod's own files) holds a secret."""

from __future__ import annotations

import pytest
import yaml

from crossmod.runtime.redaction import is_secret_key, redact, redact_override
from tests.bad_input.test_secrets import files_holding_secrets

SHAPES = {
    "+creds={api_key: nested-5ecret-8e1f02, user: alice}": "nested-5ecret-8e1f02",
    "+wandb_key=wkey-5ecret-31c9d7": "wkey-5ecret-31c9d7",
    "+pwd=pwd-5ecret-a0b4e6": "pwd-5ecret-a0b4e6",
    "+mirror=https://alice:url-5ecret-77d2c1@data.example.org/ds": "url-5ecret-77d2c1",
    # the third pass's shapes: nested keys, KEY=value list items and shell lines, signed URLs, credentials without a
    # scheme, and a value read from the environment (stored resolved in config.yaml)
    "+wb_extra={init: {settings: {x-api-key: deep-5ecret-11aa22}}}": "deep-5ecret-11aa22",
    '+env_vars=["WANDB_API_KEY=envlist-5ecret-33bb44"]': "envlist-5ecret-33bb44",
    '+launcher_setup=["export WANDB_API_KEY=export-5ecret-55cc66"]': "export-5ecret-55cc66",
    "+signed='https://bucket.example.org/x?sig=sig-5ecret-77dd88&se=2026'": "sig-5ecret-77dd88",  # quoted: `=` inside
    "+amz='https://s3.example.org/x?X-Amz-Signature=amz-5ecret-99ee00&X-Amz-Date=1'": "amz-5ecret-99ee00",
    "+scp_source=alice:noscheme-5ecret-12ab34@host.example.org:/data": "noscheme-5ecret-12ab34",
    "+resolved=${oc.env:CROSSMOD_TEST_TOKEN}": "envres-5ecret-56cd78",
}
ENVIRONMENT = {"CROSSMOD_RUN_ID": "shapes", "CROSSMOD_TEST_TOKEN": "envres-5ecret-56cd78"}


def test_a_sweep_with_secrets_in_every_shape_leaves_none_in_any_file(train_run):
    result = train_run("-m", "debug=fdr", "data.source.num_groups=40", "data.samples_per_shard=64", *SHAPES, env=ENVIRONMENT)
    console = result.stdout + result.stderr  # the launcher's `#0 : <overrides>` line included (slurm-*.out under SLURM)
    assert "#0 : " in console and [s for s in SHAPES.values() if s in console] == []
    sweep = train_run.log_dir / "synthetic_concat" / "multiruns" / "shapes"
    (job,) = [p for p in sweep.iterdir() if p.is_dir()]
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        assert (job / ".hydra" / name).is_file()
    assert (sweep / "multirun.yaml").is_file()
    assert files_holding_secrets(sweep, list(SHAPES.values())) == {}
    overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
    assert (
        "+creds={api_key:***,user:alice}" in overrides
    )  # a sweep job gets Hydra's spelling and "+mirror=https://***@data.example.org/ds" in overrides
    saved = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
    assert saved["creds"] == {"api_key": "***", "user": "alice"} and saved["mirror"] == "https://***@data.example.org/ds"
    assert saved["wb_extra"] == {"init": {"settings": {"x-api-key": "***"}}} and saved["env_vars"] == ["WANDB_API_KEY=***"]
    resolved = yaml.safe_load((job / "config.yaml").read_text())  # crossmod's, resolved
    assert resolved["resolved"] == "***" and resolved["amz"] == "https://s3.example.org/x?X-Amz-Signature=***&X-Amz-Date=1"


@pytest.mark.parametrize("key", ["wandb_key", "openai_key", "pwd", "db_pwd", "HF_KEY", "key"])
def test_more_key_spellings_are_secret(key):
    assert is_secret_key(key) and redact({key: "s"}) == {key: "***"}


@pytest.mark.parametrize("key", ["exclude_keys", "sort_key", "group_key", "data_key", "monkey", "keyboard"])
def test_ordinary_key_words_stay(key):
    assert not is_secret_key(key)


def test_urls_lose_their_credentials_wherever_they_are():
    assert redact({"a": ["s3://id:pw@bucket/x"]}) == {"a": ["s3://***@bucket/x"]}
    assert redact_override("data.url=https://tok@host/x?token=abc&n=1") == "data.url=https://***@host/x?token=***&n=1"
    assert redact_override("x=[1,{password: p}]") == "x=[1,{password: ***}]"
    assert redact_override("data.url=https://host/x") == "data.url=https://host/x"


def test_paths_in_the_environment_are_no_secrets(monkeypatch, tmp_path):
    """`PWD` holds the working directory and `SSH_AUTH_SOCK` a socket path: a run's config naming a folder below them
    keeps its paths (a blanked path would break every job reading the run); a secret-named variable's value goes."""
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    monkeypatch.setenv("MY_API_TOKEN", "tok-5ecret-0a1b2c")
    config = {"paths": {"data_dir": f"{tmp_path}/data"}, "sock": f"{tmp_path}/agent.sock", "resolved": "tok-5ecret-0a1b2c"}
    assert redact(config) == {"paths": {"data_dir": f"{tmp_path}/data"}, "sock": f"{tmp_path}/agent.sock", "resolved": "***"}

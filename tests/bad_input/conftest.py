"""One tiny trained run and one exported culture, made as users make them, for the attacks in this suite.

The run is launched the way a user who types secrets as overrides would (W&B offline beside the CSV
logger): the secrets tests look for those values in it; the code-execution tests tamper with copies of
its checkpoint, config and exported culture folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import SMALL_DATA, TrainRun

# Distinctive values (never a substring of anything else a run writes), by the spelling of their key.
SECRETS = {
    "+WANDB_API_KEY": "wandb-5ecret-7f3a91",
    "+wandbApiKey": "camel-5ecret-2b8c44",
    "+accessToken": "access-5ecret-9d1e07",
    "+auth": "auth-5ecret-c4f260",
    "+private_key": "private-5ecret-5a7b13",
}


@pytest.fixture(scope="session")
def leaky_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    runner = TrainRun(data_dir, tmp_path_factory.mktemp("bad_input") / "runs")
    overrides = [f"{key}={value}" for key, value in SECRETS.items()]
    runner(*SMALL_DATA, "debug=limit", "logger=wandb", *overrides, env={"CROSSMOD_RUN_ID": "leaky"})
    return runner.log_dir / "synthetic_concat" / "runs" / "leaky"


@pytest.fixture(scope="session")
def exported_culture(leaky_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's US culture as export.py writes it."""
    from crossmod.artifacts.culture_folders import export_culture
    from crossmod.artifacts.loading import load

    model, info = load(leaky_run)
    return export_culture(model, info, leaky_run, "US", tmp_path_factory.mktemp("export") / "US")


@pytest.fixture(scope="session")
def retrieval_culture(leaky_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's US culture as `export.py kind=retrieval` writes it: its training memes as the database."""
    from crossmod.artifacts.culture_folders import export_culture
    from crossmod.artifacts.loading import load

    model, info = load(leaky_run)
    return export_culture(model, info, leaky_run, "US", tmp_path_factory.mktemp("retrieval") / "US", kind="retrieval")


@pytest.fixture
def culture_copy(exported_culture: Path, tmp_path: Path) -> Path:
    """A copy of the exported folder for one test to tamper with."""
    return Path(shutil.copytree(exported_culture, tmp_path / "US"))


from tests.bad_input.tally import pytest_runtest_logreport, pytest_terminal_summary  # noqa: E402, F401  (the suite's count)

"""The one message has no state behind it: each main carries its own check, and the callback keeps what one run created."""

from __future__ import annotations

import sys
import types

import pytest
from omegaconf import OmegaConf

from crossmod.runtime import user_errors
from crossmod.runtime.user_errors import CheckFirst, UserError, entry_point


def _recipe(name: str, message: str, monkeypatch: pytest.MonkeyPatch):
    """A recipe module `crossmod.recipes.<name>` whose main is refused by its own check with `message`."""

    def check(cfg):
        raise UserError(message)

    module = types.ModuleType(f"crossmod.recipes.{name}")
    module.main = entry_point(check)(lambda cfg: "ran")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module, check


def test_each_job_runs_its_own_check_whichever_main_was_decorated_last(monkeypatch, capsys):
    first, first_check = _recipe("first_job", "the first job's refusal", monkeypatch)
    second, second_check = _recipe("second_job", "the second job's refusal", monkeypatch)
    callback = CheckFirst()
    assert callback.check_of("first_job") is first_check and callback.check_of("second_job") is second_check
    assert callback.check_of("no_such_job") is None  # a job name no recipe has: its main checks for itself
    config = OmegaConf.create({"hydra": {"job": {"name": "first_job"}, "run": {"dir": "."}, "output_subdir": None}})
    with pytest.raises(SystemExit):
        callback.on_run_start(config)
    assert "the first job's refusal" in capsys.readouterr().err
    # outside Hydra (no callback) the main refuses for itself, with its own check
    with pytest.raises(SystemExit):
        second.main(OmegaConf.create({}))
    assert "the second job's refusal" in capsys.readouterr().err


def test_two_callbacks_keep_their_own_record_of_what_their_run_created(tmp_path):
    one, other = CheckFirst(), CheckFirst()
    one.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "a" / "b")}}}))
    other.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "c")}}}))
    assert (one.created, other.created) == (tmp_path / "a", tmp_path / "c")
    assert not [name for name, value in vars(CheckFirst).items() if not name.startswith("__") and not callable(value)]
    assert not hasattr(user_errors, "_State")

"""A mistake in how a job is started is one message naming the key and the fix, before anything is built.

Every entry point is run as users run it, with its data and run folders in tmp_path: exit status 1, the
message on stderr, no traceback, and no run directory (nor `.hydra/` folder) left behind. No job trains.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from crossmod.runtime.user_errors import UserError, missing_keys, require
from tests.conftest import ROOT, scaled
from tests.data.sources import layouts


def _run(
    tmp_path: Path, program: str, *overrides: str, paths: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python <program> <overrides>` (or `python -m <module>`) from tmp_path, its data and runs kept in tmp_path."""
    command = [sys.executable, *(["-m", program] if not program.endswith(".py") else [str(ROOT / program)])]
    where = [f"paths.log_dir={tmp_path / 'logs'}", f"paths.data_dir={tmp_path / 'data'}"] if paths else []
    base_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    flags = [o for o in overrides if o in ("-m", "--multirun")]  # Hydra flags first, then the overrides
    return subprocess.run(
        [*command, *flags, *where, *(o for o in overrides if o not in flags)],
        cwd=ROOT if not program.endswith(".py") else tmp_path,
        env={**base_env, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )


def _refused(result: subprocess.CompletedProcess, tmp_path: Path, *named: str) -> str:
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "] error: " in line]
    assert len(errors) == 1, result.stderr[-3000:]
    for text in named:
        assert text in errors[0], errors[0]
    logs = tmp_path / "logs"
    assert not logs.exists() or not any(logs.rglob("*")), sorted(map(str, logs.rglob("*")))
    assert not list(tmp_path.rglob(".hydra")) and not list(tmp_path.rglob("multirun.yaml"))
    return errors[0]


def test_a_missing_shard_dir_is_named_with_its_fix(tmp_path):
    _refused(_run(tmp_path, "train.py", "data=shards"), tmp_path, "data.shard_dir is not set", "pass data.shard_dir=")


def test_a_shard_dir_without_shards_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    result = _run(tmp_path, "train.py", "data=shards", f"data.shard_dir={tmp_path / 'empty'}")
    _refused(result, tmp_path, f"data.shard_dir={tmp_path / 'empty'} has no manifest.json", "crossmod prepare data=<dataset>")


def test_a_missing_raw_dir_is_named_with_its_fix(tmp_path):
    result = _run(tmp_path, "train.py", "data=multi3hate", f"data.raw_dir={tmp_path / 'nowhere'}", "fold=0", "num_folds=3")
    _refused(result, tmp_path, f"data.raw_dir={tmp_path / 'nowhere'} is not a folder", "pass data.raw_dir=")


def test_a_raw_dir_without_the_published_layout_is_named(tmp_path):
    (tmp_path / "raw").mkdir()
    result = _run(tmp_path, "train.py", "data=multi3hate", f"data.raw_dir={tmp_path / 'raw'}", "fold=0", "num_folds=3")
    _refused(result, tmp_path, "final_annotations.csv does not exist", "pass data.raw_dir=")


def test_a_dataset_without_a_validation_split_needs_a_fold_before_the_trainer_is_built(tmp_path):
    raw = layouts.multi3hate(tmp_path / "m3h", memes=3, languages=("en",), raw=False)
    result = _run(tmp_path, "train.py", "data=multi3hate", f"data.raw_dir={raw}")
    _refused(result, tmp_path, "fold=null", "has no validation split", "fold=0 num_folds=3")
    assert "Seed set" not in result.stdout + result.stderr and not (tmp_path / "data").exists()  # no trainer, nothing converted


def test_an_out_of_range_fold_is_named(tmp_path):
    _refused(_run(tmp_path, "train.py", "fold=7", "num_folds=3"), tmp_path, "fold=7 is outside 0..2", "fold=k")


@pytest.mark.parametrize("program", ["train.py", "cross_validate.py"])
def test_a_refused_recipe_names_its_program_and_leaves_no_run_directory(tmp_path, program):
    result = _run(tmp_path, program, "experiment=toxictags_fewshot")
    _refused(result, tmp_path, "experiment=toxictags_fewshot", "run it with `crossmod fewshot experiment=toxictags_fewshot")


def test_a_sweep_job_refused_after_hydra_made_its_folders_removes_them(tmp_path):
    """In a `-m` sweep each job is checked when it starts, after Hydra created the sweep and job folders."""
    _refused(_run(tmp_path, "train.py", "-m", "data=shards"), tmp_path, "data.shard_dir is not set")


def test_hydra_full_error_shows_the_traceback_and_still_leaves_nothing(tmp_path):
    result = _run(tmp_path, "train.py", "data=shards", env={"HYDRA_FULL_ERROR": "1"})
    assert result.returncode == 1 and "Traceback" in result.stderr and "UserError: data.shard_dir is not set" in result.stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    ("module", "other"), [("crossmod.recipes.fewshot", "memebridge_prompting"), ("crossmod.recipes.memebridge", "toxictags_fewshot")]
)
def test_a_prompting_module_refuses_the_other_protocols_recipe(tmp_path, module, other):
    result = _run(tmp_path, module, f"experiment={other}")
    program = "crossmod " + module.rsplit(".", 1)[1]
    _refused(result, tmp_path, f"experiment={other} is not run by {program}", f"experiment={other} …`")


def test_a_prompting_program_refuses_a_recipe_without_its_settings(tmp_path):
    result = _run(tmp_path, "zeroshot.py", "experiment=synthetic_concat")
    _refused(result, tmp_path, "experiment=synthetic_concat has no `zeroshot` settings", "experiment=qwen_zeroshot")


def test_evaluate_without_or_with_a_missing_ckpt(tmp_path):
    _refused(_run(tmp_path, "evaluate.py"), tmp_path, "ckpt is not set", "pass ckpt=<run dir")
    result = _run(tmp_path, "evaluate.py", f"ckpt={tmp_path / 'no-run'}")
    _refused(result, tmp_path, f"ckpt={tmp_path / 'no-run'} does not exist", "pass ckpt=")
    assert [p.name for p in tmp_path.iterdir()] == []  # evaluate.py runs in the current folder: nothing written there either


def test_predict_without_or_with_missing_adapters(tmp_path):
    (tmp_path / "memes").mkdir()
    _refused(
        _run(tmp_path, "predict.py", paths=False), tmp_path, "adapters, inputs are not set", "pass adapters=<an exported culture folder"
    )
    result = _run(tmp_path, "predict.py", f"adapters={tmp_path / 'export' / 'DE'}", f"inputs={tmp_path / 'memes'}", paths=False)
    _refused(result, tmp_path, f"adapters={tmp_path / 'export' / 'DE'} does not exist", "crossmod export run=<run dir>")
    result = _run(tmp_path, "predict.py", f"adapters={tmp_path / 'memes'}", f"inputs={tmp_path / 'memes'}", paths=False)
    _refused(result, tmp_path, "is not an exported culture folder (no culture_card.json in it)")
    assert [p.name for p in tmp_path.iterdir()] == ["memes"]


def test_export_without_a_run(tmp_path):
    _refused(_run(tmp_path, "export.py", paths=False), tmp_path, "run is not set", "pass run=<a run directory")
    result = _run(tmp_path, "export.py", f"run={tmp_path}", paths=False)
    _refused(result, tmp_path, "is not a run directory (no metrics.json in it)")


def test_missing_keys_are_found_without_resolving_interpolations():
    def boom(*_):
        raise AssertionError("resolved")

    if not OmegaConf.has_resolver("test_boom"):
        OmegaConf.register_new_resolver("test_boom", boom)
    cfg = OmegaConf.create(
        {"data": {"shard_dir": "???", "heads": "${test_boom:${data.shard_dir}}", "splits": ["???", "${test_boom:}"]}, "hydra": {"x": "???"}}
    )
    assert missing_keys(cfg) == ["data.shard_dir", "data.splits[0]"]
    assert missing_keys(cfg, ["hydra"]) == ["hydra.x"]
    with pytest.raises(
        UserError, match=r"data.shard_dir, data.splits\[0\] are not set .* Fix: pass data.shard_dir=<a folder of prepared shards"
    ):
        require(cfg)


def test_prepare_names_a_missing_raw_dir(tmp_path):
    result = _run(
        tmp_path,
        "prepare.py",
        "data=multi3hate",
        f"data.raw_dir={tmp_path / 'nowhere'}",
        f"data.shard_root={tmp_path / 'shards'}",
        paths=False,
    )
    _refused(result, tmp_path, f"data.raw_dir={tmp_path / 'nowhere'} is not a folder", "docs/datasets.md")
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize(
    "overrides, named",
    [
        (("trainer=gpu",), ("trainer.accelerator=gpu asks for a GPU, but torch sees none", "trainer=cpu")),
        (
            ("model.text.name_or_path=/nowhere/all-MiniLM-L6-v2",),
            ("model.text.name_or_path=/nowhere/all-MiniLM-L6-v2 is not a folder", "hub id"),
        ),
        (("ckpt_path=/nowhere/last.ckpt",), ("ckpt_path=/nowhere/last.ckpt does not exist", "status.json")),
    ],
    ids=["gpu-without-gpu", "missing-model-folder", "missing-checkpoint"],
)
def test_train_refuses_what_would_fail_later_before_a_run_folder_exists(tmp_path, overrides, named):
    if "trainer=gpu" in overrides:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    _refused(_run(tmp_path, "train.py", *overrides), tmp_path, *named)


def test_cross_validate_refuses_fast_dev_run_before_fold_0_trains(tmp_path):
    _refused(_run(tmp_path, "cross_validate.py", "num_folds=3", "debug=fdr"), tmp_path, "debug=fdr", "use debug=limit")


def test_a_refusal_wrapped_by_hydras_instantiate_is_one_line(capsys, monkeypatch):
    """A file's untrusted `_target_` found while Hydra instantiates (InstantiationException around
    UntrustedConfigError) is the user's input refused: one line, exit 1, no traceback."""
    from hydra.errors import InstantiationException

    from crossmod.models.trusted_targets import UntrustedConfigError
    from crossmod.runtime.user_errors import entry_point

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    @entry_point()
    def main(cfg):
        try:
            raise UntrustedConfigError("shared/config.yaml: data.source._target_ 'os.system' is not one crossmod builds")
        except UntrustedConfigError as error:
            raise InstantiationException("Error in call to target 'crossmod.data.memes.MemeDataModule'") from error

    with pytest.raises(SystemExit) as exited:
        main({})
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.count("\n") == 1 and "'os.system' is not one crossmod builds" in err

    @entry_point()
    def broken(cfg):
        raise InstantiationException("a bug, not a refusal")

    with pytest.raises(InstantiationException):  # anything else keeps its traceback
        broken({})


HIDE = """
import sys
import crossmod.launch.preflight as preflight
HIDDEN, found = {hidden!r}, preflight.installed
preflight.installed = lambda module: module not in HIDDEN and found(module)  # as if the extra were not installed
from crossmod.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "hidden, args, extra",
    [
        ("wandb", ["train", "logger=wandb"], "crossmod[wandb]"),
        ("hydra_plugins.hydra_optuna_sweeper", ["train", "hparams_search=concat_optuna"], "crossmod[sweeps]"),
        ("deepspeed", ["train", "strategy=deepspeed_zero2"], "crossmod[deepspeed]"),
        ("rapidocr_onnxruntime", ["train", "data=multi3hate", "data.ocr={engine: rapidocr, langs: [en]}", "fold=0", "num_folds=3"], "crossmod[ocr]"),
    ],
)
def test_a_missing_optional_part_is_one_line_naming_its_extra_before_a_run_folder(tmp_path, hidden, args, extra):
    job, *overrides = args
    if "data=multi3hate" in overrides:
        overrides.append(f"data.raw_dir={layouts.multi3hate(tmp_path / 'm3h', memes=3, languages=('en',), raw=False)}")
    where = [f"paths.log_dir={tmp_path / 'logs'}", f"paths.data_dir={tmp_path / 'data'}"]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    result = subprocess.run(
        [sys.executable, "-c", HIDE.format(hidden=[hidden]), job, *where, *overrides],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=scaled(300),
    )  # fmt: skip
    line = _refused(result, tmp_path, f'Fix: pip install "{extra}"', "a plain install leaves out")
    assert hidden.split(".")[-1] in line


def test_a_module_is_installed_when_found_and_not_when_it_or_its_parent_is_missing():
    from crossmod.launch.preflight import installed

    assert installed("hydra") and installed("hydra_plugins.hydra_optuna_sweeper")
    assert not installed("crossmod_no_such_module") and not installed("crossmod_no_such_module.sub")


def test_export_refuses_an_unknown_culture_from_the_runs_config_before_loading_it(tmp_path):
    """The run's config.yaml names its heads: a culture it lacks is refused before the model (minutes for a VLM) loads.
    This run has no checkpoint at all, so a refusal after loading would name the missing weights instead."""
    run = tmp_path / "shared" / "r"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    (run / "config.yaml").write_text("data:\n  heads:\n    US: {kind: binary}\n    DE: {kind: binary}\n")
    result = _run(tmp_path, "export.py", f"run={run}", "culture=XX", paths=False)
    _refused(result, tmp_path, "culture 'XX' is not a head of this run (heads: ['US', 'DE'])", "pass culture=<one of")


@pytest.mark.parametrize(
    "override, said",
    [
        ("data.batch_size=0", "data.batch_size=0 is not a whole number ≥ 1"),  # divided by zero after the data was made
        ("data.num_workers=-1", "data.num_workers=-1 is not a whole number ≥ 0"),  # torch's DataLoader traceback
        ("model.optimizer.lr=-1", "model.optimizer.lr=-1 is not a number above 0"),  # Hydra's "Error in call to target"
        ("model.optimizer.lr=abc", "model.optimizer.lr='abc' is not a number above 0"),
        ("trainer.max_epochs=-5", "trainer.max_epochs=-5 is not a whole number ≥ -1 (or null)"),
        ("seed=1.5", "seed=1.5 is not a whole number ≥ 0"),
    ],
)
def test_a_number_out_of_its_range_is_named_before_anything_is_built(tmp_path, override, said):
    _refused(_run(tmp_path, "train.py", override), tmp_path, said, "Fix: pass ")


def test_a_scoring_jobs_threshold_out_of_range_is_named(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "culture_card.json").write_text("{}")
    result = _run(tmp_path, "predict.py", f"adapters={tmp_path / 'folder'}", f"inputs={tmp_path}", "threshold=1.5", paths=False)
    _refused(result, tmp_path, "threshold=1.5 is not a number ≥ 0 and ≤ 1")


def test_a_component_hydra_cannot_build_is_one_line_naming_its_key(tmp_path):
    """A setting no cheap check knows (Lightning's precision names) still comes back as one line with its key, not as
    Hydra's "Error in call to target" text; HYDRA_FULL_ERROR=1 keeps the traceback."""
    result = _run(tmp_path, "train.py", "trainer.precision=fp7", "debug=limit")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if "] error: " in line]
    assert "trainer (lightning.pytorch.trainer.trainer.Trainer) cannot be built from its settings: ValueError: Precision 'fp7'" in line
    assert "Error in call to target" not in result.stderr


def test_a_build_refusal_names_the_key_whose_target_failed():
    from hydra.errors import InstantiationException

    from crossmod.runtime.user_errors import build_refusal

    def wrapped(cause: Exception) -> InstantiationException:
        """What Hydra raises around a constructor's error: the cause chained under its own text."""
        try:
            try:
                raise cause
            except type(cause) as raised:
                raise InstantiationException("Error in call to target 'torch.optim.adamw.AdamW':\nValueError(...)") from raised
        except InstantiationException as error:
            return error

    cfg = OmegaConf.create({"model": {"optimizer": {"_target_": "torch.optim.AdamW", "lr": -1}}, "trainer": {"_target_": "x.Trainer"}})
    refusal = build_refusal(wrapped(ValueError("Invalid learning rate: -1\nsecond line")), cfg)
    assert refusal is not None and refusal.key == "model.optimizer"
    assert str(refusal).startswith("model.optimizer (torch.optim.adamw.AdamW) cannot be built from its settings: ValueError: Invalid learning rate: -1.")
    assert build_refusal(wrapped(AttributeError("a bug")), cfg) is None  # a bug is Hydra's to report, traceback and all


@pytest.mark.parametrize(
    "override, said",
    [("policy.act.precision=1.5", "policy.act.precision is 1.5, not a number in (0, 1]"), ("+policy.remove={precision: 0.9}", "policy action 'remove'")],
)
def test_a_policy_that_cannot_be_applied_is_named_before_training(tmp_path, override, said):
    _refused(_run(tmp_path, "train.py", "policy=cautious", override), tmp_path, said, "policy=cautious")


def test_an_unknown_calibration_map_is_refused_by_key_before_anything_is_built():
    from omegaconf import OmegaConf

    from crossmod.launch import preflight
    from crossmod.runtime.user_errors import UserError

    with pytest.raises(UserError, match=r"calibration=beta is not a calibration map crossmod fits.*calibration=temperature \| platt \| isotonic") as refused:
        preflight.decision_settings(OmegaConf.create({"calibration": "beta"}))
    assert refused.value.key == "calibration"
    preflight.decision_settings(OmegaConf.create({"calibration": "platt"}))
    with pytest.raises(UserError, match=r"abstention=variance is not a disagreement score.*abstention=spread \| entropy"):
        preflight.decision_settings(OmegaConf.create({"abstention": "variance"}))


def test_serve_refuses_what_would_fail_later_before_it_binds_or_loads(tmp_path):
    export = tmp_path / "export" / "DE"
    export.mkdir(parents=True)
    (export / "culture_card.json").write_text('{"culture": "DE"}')
    _refused(_run(tmp_path, "crossmod", "serve", paths=False), tmp_path, "adapters is not set", "crossmod export run=<run dir>")
    result = _run(tmp_path, "crossmod", "serve", f"adapters=[{tmp_path / 'nowhere'}]", paths=False)
    _refused(result, tmp_path, f"adapters={tmp_path / 'nowhere'} does not exist")
    _refused(_run(tmp_path, "crossmod", "serve", f"adapters=[{export},{export}]", paths=False), tmp_path, "two exports of culture DE")
    for override, named in (
        ("port=80", "port=80 is not a whole number ≥ 1024 and ≤ 65535"),
        ("limits.max_queue=0", "limits.max_queue=0 is not a whole number ≥ 1"),
        ("host=10.0.0.7", "host=10.0.0.7 is not an address the server binds"),
        ("allow_missing=[caption]", "names ['caption'], not inputs"),
        (f"auth.token_file={tmp_path / 'no-token'}", "auth.token_file="),
    ):
        _refused(_run(tmp_path, "crossmod", "serve", f"adapters=[{export}]", override, paths=False), tmp_path, named)
    (tmp_path / "short").write_text("abc\n")
    result = _run(tmp_path, "crossmod", "serve", f"adapters=[{export}]", f"auth.token_file={tmp_path / 'short'}", paths=False)
    line = _refused(result, tmp_path, "holds no usable token", "secrets.token_urlsafe")
    assert "abc" not in line.replace(str(tmp_path), "")  # the token is never printed
    hidden = subprocess.run(
        [sys.executable, "-c", HIDE.format(hidden=["litserve"]), "serve", f"adapters=[{export}]"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=scaled(300),
    )  # fmt: skip
    _refused(hidden, tmp_path, 'Fix: pip install "crossmod[serve]"', "crossmod serve needs litserve")

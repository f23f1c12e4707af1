"""The console a newcomer reads: each log record once, no advertisement, no harmless library warnings."""

from __future__ import annotations

from tests.conftest import SMALL_DATA


def test_a_run_prints_each_record_once_without_advertisements_or_harmless_warnings(train_run):
    result = train_run("debug=fdr", *SMALL_DATA)
    output = result.stdout + result.stderr
    assert output.count("GPU available: False") == 1  # Lightning's handler and Hydra's printed every record twice
    assert output.count("Seed set to") == 1
    assert "litlogger" not in output.lower() and "💡" not in output
    assert ".with_length() only sets" not in output and "has `__len__` defined" not in output and "LeafSpec" not in output
    assert "Selection: dataset_val" in output and "mean" in output  # the table and its rule are what remains


def test_a_run_without_checkpoint_selection_says_it_scored_the_final_weights(train_run):
    """The dataset's rule names a selection; with checkpointing off none happened, and the report must not claim one."""
    import json

    result = train_run("debug=fdr", *SMALL_DATA, "callbacks.model_checkpoint=null", "callbacks.fold_results=null")
    (run_dir,) = train_run.run_dirs("synthetic_concat")
    selection = json.loads((run_dir / "metrics.json").read_text())["selection"]
    assert selection["weights"] == "final" and selection["description"].startswith("final weights after the configured schedule")
    assert "Selection: dataset_val — final weights" in result.stdout


def test_building_a_tiny_model_prints_nothing_from_the_libraries(tmp_path):
    """A fresh machine's first run builds the tiny models; their save imports DeepSpeed (its CPU-detection warning) and
    draws Transformers' shard-writing bar. Neither reaches the console; the folder is built."""
    import subprocess
    import sys

    from tests.conftest import ROOT, scaled

    code = f"import crossmod.runtime.resolvers as r; r.tiny_text_encoder({str(tmp_path / 'bert')!r}); import sys; print('deepspeed' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=scaled(300))
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "Setting accelerator to CPU" not in output and "Writing model shards" not in output, output
    assert done.stdout.strip() == "True"  # DeepSpeed was imported: the filter, not luck, kept the console clean
    assert (tmp_path / "bert" / "config.json").is_file()

"""Same seed, same numbers: a run's metrics and predictions do not depend on the machine's load or on the number
of loader workers (docs/reproducibility.md).

The same short run trains twice: once while two busy processes this test starts compete for the cores, once alone
with another `data.num_workers`. Both runs compute with the same number of threads (the suite's), which does move
float sums and is recorded instead.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import SMALL_DATA

SHORT_RUN = (*SMALL_DATA, "seed=7", "trainer.max_epochs=2", "print_table=false")


def busy_processes(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def test_a_run_gives_the_same_numbers_under_load_and_with_other_loader_workers(train_run):
    loaders = {}
    busy = busy_processes(2)
    try:
        train_run(*SHORT_RUN, "data.num_workers=1", env={"CROSSMOD_RUN_ID": "loaded"})
    finally:
        for process in busy:
            process.kill()
            process.wait()
    train_run(*SHORT_RUN, "data.num_workers=2", env={"CROSSMOD_RUN_ID": "two-workers"})
    loaded, other = (train_run.log_dir / "synthetic_concat" / "runs" / name for name in ("loaded", "two-workers"))
    first, second = train_run.metrics(loaded), train_run.metrics(other)
    for metrics, workers in ((first, 1), (second, 2)):
        loaders[workers] = metrics["environment"]["loader_workers"]
    assert loaders == {1: 1, 2: 2}, "the runs differ in their loader workers, and metrics.json says so"
    assert first["environment"]["threads"] == second["environment"]["threads"]
    assert first["global_step"] == second["global_step"] > 0
    for part in ("best", "final"):
        assert first[part] == second[part], part  # every metric, bit for bit
    for stage in ("val", "test"):
        assert (loaded / "predictions" / f"{stage}.csv").read_bytes() == (other / "predictions" / f"{stage}.csv").read_bytes(), stage

"""The suite's forked commands (tests/zygote.py) behave as fresh interpreters do: same numbers, output, exit codes and
timeouts; what a fork cannot reproduce goes to a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SMALL_DATA, TrainRun
from tests.zygote import _ZYGOTE, Zygote, run_python

SCRIPT = """import os, sys
print("to stdout", sys.argv[1:], os.getcwd(), sys.path[0])
print("to stderr", os.environ.get("ZYGOTE_PROBE"), file=sys.stderr)
if sys.argv[1] == "raise":
    raise ValueError("raised")
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("argument", ["0", "3", "raise"])
def test_a_forked_command_prints_and_exits_as_a_fresh_one(tmp_path, argument):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    command = [sys.executable, str(script), argument]
    env = {**os.environ, "ZYGOTE_PROBE": "seen"}
    assert _ZYGOTE.forkable(command, env)
    forked = run_python(command, cwd=tmp_path, env=env)
    fresh = run_python(command, cwd=tmp_path, env=env, fresh=True)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)
    assert forked.stderr == fresh.stderr and "to stderr seen" in forked.stderr
    assert forked.returncode == {"0": 0, "3": 3, "raise": 1}[argument]
    assert ("ValueError: raised" in forked.stderr) == (argument == "raise")


def test_a_timeout_stops_the_forked_command_and_what_it_started(tmp_path):
    marker = tmp_path / "child.pid"
    script = tmp_path / "sleeper.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_python([sys.executable, str(script)], cwd=tmp_path, timeout=20)
    assert time.monotonic() - started < 60
    status = Path(f"/proc/{marker.read_text()}/status")
    for _ in range(50):  # gone, or a zombie waiting for whichever process adopted it to reap it
        if not status.exists() or "State:\tZ" in status.read_text():
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the command's own process {marker.read_text()} outlived the timeout")


@pytest.mark.filterwarnings("ignore:fresh interpreter")  # what these probes are meant to cause
def test_what_a_fork_cannot_reproduce_gets_a_fresh_interpreter():
    env = dict(os.environ)
    assert not _ZYGOTE.forkable([sys.executable, "-c", "pass"], env)  # interpreter flags
    assert not _ZYGOTE.forkable([sys.executable, "train.py"], {**env, "OMP_NUM_THREADS": "7"})  # read at import
    assert not _ZYGOTE.forkable([sys.executable, "train.py"], {**env, "HF_HUB_OFFLINE": "0" if env.get("HF_HUB_OFFLINE") == "1" else "1"})
    assert not _ZYGOTE.forkable(["bash", "-c", "true"], env)
    # what libraries set in the worker while tests run is not read at import: it must not end forking for the session
    runtime = {"KMP_DUPLICATE_LIB_OK": "True", "LD_LIBRARY_PATH": "/opt/ops", "TORCHINDUCTOR_CACHE_DIR": "/tmp/x", "PL_GLOBAL_SEED": "1"}
    assert _ZYGOTE.forkable([sys.executable, "train.py"], {**env, **runtime})


def test_a_forked_training_gives_the_fresh_interpreters_numbers(data_dir, tmp_path):
    runs = {}
    for name in ("forked", "fresh"):
        runner = TrainRun(data_dir, tmp_path / name)
        runner(*SMALL_DATA, "debug=limit", "seed=3", env={"CROSSMOD_RUN_ID": name}, fresh=name == "fresh")
        run_dir = runner.log_dir / "synthetic_concat" / "runs" / name
        runs[name] = (json.loads((run_dir / "metrics.json").read_text()), (run_dir / "predictions" / "test.csv").read_text())
    assert runs["forked"][1] == runs["fresh"][1]
    assert runs["forked"][0]["best"] == runs["fresh"][0]["best"]


def test_the_zygote_never_imports_crossmod(tmp_path):
    """Each command imports crossmod's modules itself, from the files as they are when it starts."""
    script = tmp_path / "modules.py"
    script.write_text("import sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(run_python([sys.executable, str(script)], cwd=tmp_path).stdout.split())
    assert "torch" in loaded and "lightning" in loaded  # forked: the stack is there before the script imports it
    crossmod = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}
    assert crossmod and not crossmod & loaded


def test_a_stopped_zygote_leaves_no_folder_behind(tmp_path):
    zygote = Zygote()
    zygote.use_environment(dict(os.environ))
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    assert zygote.forkable([sys.executable, str(script), "0"], dict(os.environ))
    assert zygote.run([sys.executable, str(script), "0"], cwd=tmp_path, env=dict(os.environ), timeout=60).returncode == 0
    folder = zygote.folder
    assert folder is not None and folder.is_dir()
    zygote.stop()
    assert not folder.exists() and zygote.process.poll() is not None


def test_a_command_whose_client_is_gone_is_stopped_with_what_it_started(tmp_path):
    """A pytest worker killed mid-test hangs up on the zygote: the command it asked for, and its children, end too."""
    import json as json_module
    import socket

    marker = tmp_path / "child.pid"
    script = tmp_path / "sleeper.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    zygote = Zygote()
    zygote.use_environment(dict(os.environ))
    try:
        assert zygote.forkable([sys.executable, str(script)], dict(os.environ))
        out = tmp_path / "out"
        request = {"cwd": str(tmp_path), "env": dict(os.environ), "argv": [str(script)], "module": None}
        request |= {"stdout": f"{out}.stdout", "stderr": f"{out}.stderr"}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(zygote.socket_path)
            client.sendall((json_module.dumps(request) + "\n").encode())
            pid = int(client.makefile("r").readline())
            for _ in range(300):
                if marker.exists() and marker.read_text():
                    break
                time.sleep(0.1)
        # the client hung up: within a few seconds the job and the process it started are gone
        for process in (pid, int(marker.read_text())):
            status = Path(f"/proc/{process}/status")
            for _ in range(100):
                if not status.exists() or "State:\tZ" in status.read_text():
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"process {process} outlived its client")
    finally:
        zygote.stop()


def test_each_forked_command_has_wandb_folders_of_its_own(tmp_path):
    """wandb (imported by timm and PEFT, preloaded) makes its media and artifact folders at import: a child that exits
    removes its own folders, never the ones the zygote and later children use."""
    script = tmp_path / "media.py"
    script.write_text(
        "import os\nfrom wandb.sdk.data_types._private import MEDIA_TMP\nfrom wandb.sdk.artifacts.artifact import Artifact\n"
        "names = [MEDIA_TMP.name, Artifact._TMP_DIR.name]\nassert all(os.path.isdir(name) for name in names)\nprint(*names)\n"
    )
    runs = [
        run_python([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True, timeout=120)
        for _ in range(2)
    ]
    assert all(run.returncode == 0 for run in runs), [run.stderr[-2000:] for run in runs]
    first, second = (run.stdout.split() for run in runs)
    assert len(first) == len(second) == 2 and not set(first) & set(second)
    assert not any(os.path.exists(name) for name in first + second)  # each removed its own at exit

"""Entry-point commands of the suite forked from an interpreter that has already imported the third-party stack.

Why: a fresh `python train.py …` spends about 13 s of CPU (2-core AMD EPYC) importing torch, transformers, Lightning,
timm and PEFT (~4,500 modules) before crossmod runs a line; a tiny test run then takes 5 s. The suite starts a few
hundred such commands, so imports were most of its time. Here one process per pytest worker (the zygote) imports those
libraries once, never runs a tensor op or starts a thread, and forks a child per command: the child gets the command's
working directory, environment, argv and output files, runs the script or module as `__main__` (crossmod's own modules
are imported fresh in every child) and exits through the interpreter's normal shutdown. Each command is still its own
process, started from the same files with the same arguments.

What a fork cannot reproduce goes to a fresh interpreter instead (`run` falls back to subprocess): interpreter flags,
an environment that differs from the zygote's in a variable the libraries read at import (threads, Hugging Face,
Python), and anything that asks for it (`fresh=True`): tests of what a first import prints (console warnings), and
twin runs that must not share the zygote's string-hash seed (every forked child has the same one).
`CROSSMOD_TESTS_FRESH=1` sends every command to a fresh interpreter.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

# The third-party stack an entry point imports (crossmod's modules are never imported here: each child imports them).
# timm and PEFT (2.6 s of every command's start on the 2-core AMD EPYC) import wandb, whose media and artifact folders
# are TemporaryDirectory objects made at import: each child gets folders of its own (`_own_wandb_folders`), or the
# first child to exit would delete them for every later one.
# matplotlib's pyplot (Agg, as crossmod.evaluation.plots sets it) draws every run's figures: 0.4 s of each start.
PRELOAD = ("torch", "transformers", "lightning", "hydra", "omegaconf", "webdataset", "sklearn.metrics", "PIL.Image", "peft", "timm", "matplotlib.pyplot")
# DeepSpeed probes accelerators and compilers at import: its own tests import it in the child.
NOT_PRELOADED = ("deepspeed",)
# Variables read while the preloaded libraries are imported or loaded (libgomp reads OMP_* when torch loads it): a
# command whose values differ from the zygote's gets a fresh interpreter. Others that libraries set at run time in the
# pytest worker (KMP_*, TORCHINDUCTOR_CACHE_DIR, PL_GLOBAL_SEED, LD_LIBRARY_PATH for JIT-built ops) are not read at
# import: they would send every later command to a fresh interpreter.
IMPORT_TIME_PREFIXES = (
    "OMP_", "MKL_", "OPENBLAS_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "PYTHON", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES",
    "TIMM_", "ACCELERATE_", "WANDB_INSECURE", "XDG_CACHE_HOME", "HOME", "LOGLEVEL", "USE_HUB_KERNELS", "USE_TORCH_XLA",
)  # fmt: skip


def _import_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES)}


# ---------------------------------------------------------------------------------------------------------- server


def _serve(socket_path: str) -> dict | None:
    """Accepts requests; returns a request in a forked job process, None in the zygote when told to stop."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(16)
    server.settimeout(5)
    parent = os.getppid()
    print("ready", flush=True)
    while True:
        try:
            connection, _ = server.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the pytest worker is gone (killed, crashed): nothing will ask again
                return None
            continue
        connection.settimeout(None)
        request = json.loads(connection.makefile("r").readline())
        if request.get("stop"):
            return None
        if os.fork() == 0:  # the monitor: runs the job in a child of its own and reports how it ended
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            job = os.fork()
            if job == 0:
                connection.close()
                return request
            try:
                connection.sendall(f"{job}\n".encode())
                status = _wait_while_asked(job, connection)
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:  # the client gave up (a timeout): it has stopped the job itself
                pass
            os._exit(0)
        connection.close()


def _wait_while_asked(job: int, connection: socket.socket) -> int:
    """The job's wait status; the job and what it started are killed if the client hangs up first (its pytest worker
    was killed or crashed), so no training outlives the run that asked for it."""
    exited = os.pidfd_open(job)  # readable the moment the job exits: no polling tick added to every command
    while True:
        done, status = os.waitpid(job, os.WNOHANG)
        if done:
            os.close(exited)
            return status
        readable, _, _ = select.select([connection, exited], [], [])
        if connection in readable and not connection.recv(1, socket.MSG_PEEK):  # end of stream: the client is gone
            for kill in (lambda: os.killpg(job, signal.SIGKILL), lambda: os.kill(job, signal.SIGKILL)):
                try:
                    kill()  # the group; the job alone if it is not yet its own group leader
                    break
                except ProcessLookupError:
                    continue
            return os.waitpid(job, 0)[1]


def _become(request: dict) -> None:
    """Turns this forked child into the requested command's process (cwd, env, stdio, argv, sys.path)."""
    os.setsid()  # its own process group: a timeout stops the command and every process it started
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.argv = list(request["argv"])


def _own_wandb_folders() -> None:
    """wandb's module-level TemporaryDirectory objects (media, artifacts) pointed at folders of this child's own: the
    zygote's stay the zygote's, and this child removes only what it made when it exits."""
    import weakref

    media, artifacts = sys.modules.get("wandb.sdk.data_types._private"), sys.modules.get("wandb.sdk.artifacts.artifact")
    folders = [(media.MEDIA_TMP, "wandb-media")] if media else []  # a module not yet imported makes its own when it is
    folders += [(artifacts.Artifact._TMP_DIR, "wandb-artifacts")] if artifacts else []
    for folder, suffix in folders:
        folder._finalizer.detach()
        folder.name = tempfile.mkdtemp(suffix)
        folder._finalizer = weakref.finalize(folder, folder._cleanup, folder.name, warn_message=f"Implicitly cleaning up {folder!r}")


def _run_job(request: dict) -> None:
    import runpy

    import numpy

    _become(request)
    _own_wandb_folders()
    numpy.random.seed()  # a fresh interpreter's unseeded state (random reseeds itself after a fork; torch's is fixed)
    if request["module"]:
        sys.path.insert(0, request["cwd"])  # as `python -m` does
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, str(Path(request["argv"][0]).resolve().parent))  # as `python script.py` does
        runpy.run_path(request["argv"][0], run_name="__main__")


def main(socket_path: str, root: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # before pyplot loads, as crossmod.evaluation.plots does
    for name in PRELOAD:
        __import__(name)
    assert threading.active_count() == 1, "a preloaded library started a thread: forking would copy it half-done"
    assert not set(NOT_PRELOADED) & set(sys.modules), "a preloaded library imported one that keeps per-process state"
    # The preloaded libraries' objects moved out of the collector's reach: a child's collections and its shutdown no
    # longer walk (and so copy, page by page) the whole inherited heap. A trivial command's exit fell from 4.6 s to 0.9 s.
    gc.collect()
    gc.freeze()
    sys.path[:] = [p for p in sys.path if p not in ("", root)]  # a job's sys.path[0] is its own (below)
    request = _serve(socket_path)
    if request is None:
        return
    try:
        _run_job(request)  # SystemExit propagates: the interpreter ends as `python <command>` would
    except Exception as error:  # printed as Python prints an uncaught one, from the command's own first frame
        traceback = error.__traceback__
        while traceback and traceback.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>"):
            traceback = traceback.tb_next
        sys.excepthook(type(error), error.with_traceback(traceback), traceback)
        sys.exit(1)


# ---------------------------------------------------------------------------------------------------------- client


class Zygote:
    """The pytest worker's side: starts the zygote on first use, forwards commands, stops it at exit."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.env: dict[str, str] = {}
        self.folder: Path | None = None  # made when the zygote starts, removed when it stops
        self.socket_path = ""
        self.lock = threading.Lock()
        self.reported: set[tuple[str, ...]] = set()

    def use_environment(self, env: dict[str, str]) -> None:
        """The environment the zygote starts with, taken once the suite has set its own variables (tests/conftest.py):
        not whatever a test has patched at the moment the first command starts it."""
        self.env = dict(env)

    def _start(self) -> None:
        root = Path(__file__).resolve().parents[1]
        self.env = self.env or dict(os.environ)
        self.folder = Path(tempfile.mkdtemp(prefix="crossmod-zygote-"))
        self.socket_path = str(self.folder / "socket")
        atexit.register(self.stop)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import sys; sys.path.insert(0, {str(root)!r}); from tests.zygote import main; main({self.socket_path!r}, {str(root)!r})",
            ],
            cwd=root,
            env=self.env,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "ready", "the zygote did not start"

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                    client.connect(self.socket_path)
                    client.sendall(b'{"stop": true}\n')
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)  # the socket and any output a timed-out command left
            self.folder = None

    def forkable(self, command: list[str], env: dict[str, str]) -> bool:
        if os.environ.get("CROSSMOD_TESTS_FRESH") == "1" or len(command) < 2 or command[0] != sys.executable:
            return False
        if command[1].startswith("-") and command[1] != "-m":
            return False  # interpreter flags
        with self.lock:
            if self.process is None:
                self._start()
        differing = sorted(k for k in set(_import_time_env(env)) | set(_import_time_env(self.env)) if env.get(k) != self.env.get(k))
        if differing and tuple(differing) not in self.reported:  # said once per set of keys, in pytest's warnings summary
            self.reported.add(tuple(differing))
            warnings.warn(f"fresh interpreter: {', '.join(differing)} differ from the zygote's (tests/zygote.py)", stacklevel=3)
        return not differing

    def run(self, command: list[str], *, cwd: str | Path, env: dict[str, str], timeout: float | None) -> subprocess.CompletedProcess:
        """Like subprocess.run(command, cwd=, env=, capture_output=True, text=True, timeout=)."""
        module = command[2] if command[1] == "-m" else None
        argv = [command[2], *command[3:]] if module else command[1:]
        out = tempfile.mkdtemp(dir=self.folder)
        request = {"cwd": str(cwd), "env": env, "argv": argv, "module": module, "stdout": f"{out}/stdout", "stderr": f"{out}/stderr"}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(self.socket_path)
            client.sendall((json.dumps(request) + "\n").encode())
            replies = client.makefile("r")
            pid = int(replies.readline())
            client.settimeout(timeout)
            try:
                returncode = int(replies.readline())
            except TimeoutError:
                os.killpg(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(command, timeout, _read(f"{out}/stdout"), _read(f"{out}/stderr")) from None
        stdout, stderr = _read(f"{out}/stdout"), _read(f"{out}/stderr")
        for name in ("stdout", "stderr"):
            os.unlink(f"{out}/{name}")
        os.rmdir(out)
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)


def _read(path: str) -> str:
    return Path(path).read_text(errors="replace") if Path(path).exists() else ""


_ZYGOTE = Zygote()


def run_python(
    command: list[str],
    *,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    check: bool = False,
    capture_output: bool = True,
    text: bool = True,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """`subprocess.run(command, capture_output=True, text=True, …)` for `[sys.executable, script | -m module, …]`,
    forked from the zygote where that gives the same process (module docstring), a fresh interpreter otherwise."""
    env = dict(os.environ if env is None else env)
    cwd = cwd or os.getcwd()
    if not fresh and capture_output and text and _ZYGOTE.forkable(list(map(str, command)), env):
        result = _ZYGOTE.run(list(map(str, command)), cwd=cwd, env=env, timeout=timeout)
    else:
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=capture_output, text=text, timeout=timeout)
    if check:
        result.check_returncode()
    return result

"""Importing crossmod changes nothing in the environment: what a process runs with is set by the command that
starts a job (crossmod.cli sets OpenMP's wait policy before it imports the job), never by an import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

# the libraries crossmod builds on set a few variables of their own when imported (torch: KMP_*, TORCHINDUCTOR_*):
# imported first, so what is left is crossmod's
PROBE = """
import importlib, json, os, pkgutil
for name in ("torch", "lightning", "transformers", "peft", "timm", "sklearn", "deepspeed", "webdataset", "hydra", "torch._inductor.config"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
before = dict(os.environ)
import crossmod
for module in pkgutil.walk_packages(crossmod.__path__, "crossmod."):
    if ".configs" not in module.name:
        importlib.import_module(module.name)
after = dict(os.environ)
print(json.dumps({k: [before.get(k), after.get(k)] for k in set(before) | set(after) if before.get(k) != after.get(k)}))
"""


def _changed(extra: dict[str, str] | None = None) -> dict[str, list]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY",)} | (extra or {})
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_every_module_leaves_the_environment_as_it_was() -> None:
    changed = _changed()
    assert not changed, f"importing crossmod changed {changed}"


def test_the_command_sets_the_wait_policy_before_the_job_loads_torch() -> None:
    """The policy reaches the job (OpenMP reads it when torch loads): `crossmod synthetic` prints the job's view."""
    probe = (
        "import os, sys; from crossmod import cli; import importlib;"
        "cli.JOBS['probe'] = cli.Job('json', 'probe'); "
        "orig = importlib.import_module; "
        "seen = {}; "
        "importlib.import_module = lambda name: (seen.setdefault('policy', os.environ.get('OMP_WAIT_POLICY')), seen.setdefault('torch', 'torch' in sys.modules), orig(name))[-1]; "
        "import json; json.main = lambda: 0; "
        "cli.run_job('probe', []); print(seen)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'policy': 'PASSIVE'" in result.stdout and "'torch': False" in result.stdout, result.stdout
    given = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env | {"OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True, text=True, timeout=120)
    assert "'policy': 'ACTIVE'" in given.stdout, given.stdout + given.stderr[-2000:]

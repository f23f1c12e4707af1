"""crossmod's own code never unpickles: every file it reads may come from someone else.

The scan reads the syntax tree of every Python file crossmod ships (datamodules, models, training,
evaluation, the entry points, scripts, bench) and lists each call that would run code from a file:
`torch.load` without `weights_only=True` (or with `weights_only=False` anywhere), the pickle family
(`pickle.load(s)`, `Unpickler`, `pandas.read_pickle`, `joblib`/`dill` loads, `numpy.load(allow_pickle=True)`),
and DeepSpeed's checkpoint readers, which unpickle their shards (`zero_to_fp32`): a DeepSpeed checkpoint
goes through src/crossmod/artifacts/consolidate.py's weights-only reader. The scanner is first shown to catch each
kind in a planted file, so an empty finding means something.
(`trust_remote_code` left unset in `from_pretrained` calls is scanned for beside this, with the VLM checks.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("src/crossmod", "scripts", "bench")
PICKLE_CALLS = {
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "_pickle.load",
    "_pickle.loads",
    "cPickle.load",
    "cPickle.loads",
    "dill.load",
    "dill.loads",
    "joblib.load",
    "pd.read_pickle",
    "pandas.read_pickle",
}
# DeepSpeed's readers of a checkpoint directory: each unpickles every shard with weights_only=False.
DEEPSPEED_READERS = {
    "get_fp32_state_dict_from_zero_checkpoint",
    "load_state_dict_from_zero_checkpoint",
    "convert_zero_checkpoint_to_fp32_state_dict",
    "convert_zero_checkpoint_to_state_dict",
    "parse_model_states",
    "parse_optim_states",
}


def crossmod_files() -> list[Path]:
    files = sorted(ROOT.glob("*.py"))
    for package in PACKAGES:
        files += sorted(p for p in (ROOT / package).rglob("*.py") if ".venv" not in p.parts)
    return files


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is(value: ast.expr | None, constant: object) -> bool:
    return isinstance(value, ast.Constant) and value.value is constant


def unpickling_calls(source: str, where: str) -> list[str]:
    """`where:line: what` for every call in `source` that could unpickle a file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("pickle", "_pickle", "dill", "joblib"):
            loads = [a.name for a in node.names if a.name in ("load", "loads", "Unpickler")]
            found += [f"{where}:{node.lineno}: from {node.module} import {name}" for name in loads]
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("zero_to_fp32"):
            found += [f"{where}:{node.lineno}: from {node.module} import {a.name}" for a in node.names if a.name in DEEPSPEED_READERS]
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        weights_only = _keyword(node, "weights_only")
        if _is(weights_only, False):
            found.append(f"{where}:{node.lineno}: {name}(weights_only=False)")
        elif name == "torch.load" and not _is(weights_only, True):
            found.append(f"{where}:{node.lineno}: torch.load without weights_only=True")
        if name in PICKLE_CALLS:
            found.append(f"{where}:{node.lineno}: {name}")
        if name.split(".")[-1] == "load" and name.split(".")[0] in ("np", "numpy") and _is(_keyword(node, "allow_pickle"), True):
            found.append(f"{where}:{node.lineno}: {name}(allow_pickle=True)")
        if name.split(".")[-1] in DEEPSPEED_READERS:
            found.append(f"{where}:{node.lineno}: {name} (DeepSpeed's reader unpickles every shard)")
    return found


PLANTED = {
    "import torch\ntorch.load(path)\n": "torch.load without weights_only=True",
    "import torch\ntorch.load(path, weights_only=False)\n": "torch.load(weights_only=False)",
    "model.load_from_checkpoint(path, weights_only=False)\n": "model.load_from_checkpoint(weights_only=False)",
    "import pickle\npickle.load(handle)\n": "pickle.load",
    "import pickle\npickle.loads(data)\n": "pickle.loads",
    "from pickle import load\n": "from pickle import load",
    "import numpy as np\nnp.load(path, allow_pickle=True)\n": "np.load(allow_pickle=True)",
    "import pandas as pd\npd.read_pickle(path)\n": "pd.read_pickle",
    "from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint\n": "import get_fp32_state_dict_from_zero_checkpoint",
    "zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint(folder)\n": "DeepSpeed's reader unpickles",
}


@pytest.mark.parametrize("source", list(PLANTED))
def test_the_scan_catches_each_kind_of_unpickling(source):
    (finding,) = unpickling_calls(source, "planted.py")
    assert PLANTED[source] in finding


def test_the_scan_passes_weights_only_loads():
    assert unpickling_calls("import torch\ntorch.load(path, map_location='cpu', weights_only=True)\n", "fine.py") == []


def test_crossmod_code_never_unpickles():
    files = crossmod_files()
    assert len(files) > 100 and any(p.name == "consolidate.py" for p in files)
    found = [hit for path in files for hit in unpickling_calls(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []

"""bench/gpu_proof.sh --cpu-smoke: the whole GPU proof on this machine with the tiny configs, crossmod installed offline
from a wheelhouse first (made against this environment as the node's base: the wheelhouse holds crossmod alone)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

from packaging.utils import canonicalize_name

from tests.conftest import ROOT, scaled
from tests.conftest import offline_pip_env as _offline_env


def test_the_gpu_proof_runs_every_section_from_an_offline_install(tmp_path):
    base = tmp_path / "base.txt"
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    base.write_text("".join(f"{name}=={version}\n" for name, version in sorted(installed.items())))
    wheelhouse = tmp_path / "wheelhouse"
    command = [sys.executable, str(ROOT / "scripts" / "wheelhouse.py"), "--base", str(base), "--out", str(wheelhouse)]
    command += ["--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", "--", "--no-index"]
    made = subprocess.run(command, cwd=tmp_path, env=_offline_env(), capture_output=True, text=True, timeout=scaled(600))
    assert made.returncode == 0, made.stderr
    assert [row["reason"] for row in json.loads((wheelhouse / "manifest.json").read_text())["wheels"]] == ["crossmod itself"]

    out = tmp_path / "gpu_proof.json"
    env = {**_offline_env(), "PYTHON": sys.executable, "OUT": str(out), "GPU_PROOF_BUDGET_S": str(int(scaled(900)))}
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_proof.sh"), "--cpu-smoke", str(wheelhouse)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(1000),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "crossmod installed offline from" in done.stdout and "5 of 5 sections passed" in done.stdout
    proof = json.loads(out.read_text())
    assert proof["cpu_smoke"] is True and "not a GPU measurement" in proof["note"]
    site = proof["environment"]["installed_into"]
    assert site and proof["environment"]["models_imported_from"].startswith(site)  # the sections ran the offline install
    sections = proof["sections"]
    assert set(sections) == {"gpu_tests", "throughput_2b", "zero3_7b", "zeroshot_batching", "vision_cache"}
    assert sections["zeroshot_batching"]["result"]["ratios"]
    assert {"epoch_cold/epoch_tower", "epoch_warm/epoch_tower"} <= set(sections["vision_cache"]["result"]["ratios"])
    assert all(s["exit_code"] == 0 and not s["timed_out"] for s in sections.values())
    assert "skipped" in sections["gpu_tests"]["output"][-1]  # no CUDA here: collected and skipped, none failed
    for name, strategy in [("throughput_2b", "ddp"), ("zero3_7b", "deepspeed_zero3")]:
        result = sections[name]["result"]
        assert result["smoke"] is True and any("Not a GPU measurement" in note for note in result["notes"])
        variant = result["variants"][strategy]
        assert variant["median"] > 0 and variant["attn_implementation"] == "sdpa"
        assert any("scaled_dot_product" in op for op in variant["attention_ops"]), variant["attention_ops"]  # what PyTorch dispatched to
    baseline = sections["throughput_2b"]["result"]["variants"]["hf_trainer"]  # transformers.Trainer + PEFT, same batches
    assert baseline["median"] > 0 and any("scaled_dot_product" in op for op in baseline["attention_ops"])
    assert "ddp/hf_trainer" in sections["throughput_2b"]["result"]["ratios"]

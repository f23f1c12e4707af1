"""DeepSpeed ZeRO-3 on CPU (gloo, two ranks) through `train.py`, with the tiny Qwen2-VL LoRA classifier:
sharded build, exact scoring of the best sharded checkpoint, exact resume, consolidation, and a
gathered adapter that reloads to the same scores."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from crossmod.artifacts.consolidate import consolidate
from crossmod.artifacts.loading import load
from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import ROOT, SMALL_DATA, scaled
from tests.zygote import run_python

pytestmark = pytest.mark.slow

ZERO3 = (
    "model=vlm",
    "strategy=deepspeed_zero3",
    "trainer=ddp_cpu",
    "model.preprocessor.image_size=56",
    "data.batch_size=4",
    "data.num_workers=0",
    "fold=0",
    "num_folds=3",
    "print_table=false",
    *SMALL_DATA,
)


@pytest.fixture(scope="module")
def tiny_qwen(data_dir: Path) -> str:
    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))


def _val_history(run: Path) -> dict[int, float]:
    rows = csv.DictReader(open(run / "csv" / "metrics.csv"))
    return {int(r["epoch"]): float(r["val/mean/auroc"]) for r in rows if r.get("val/mean/auroc")}


def _val_probabilities(run: Path) -> dict[tuple[str, str], float]:
    return {(r["id"], r["head"]): float(r["probability"]) for r in csv.DictReader(open(run / "predictions" / "val.csv"))}


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory, data_dir, tiny_qwen) -> Path:
    from tests.conftest import TrainRun

    train_run = TrainRun(data_dir, tmp_path_factory.mktemp("zero3") / "runs")
    train_run(
        *ZERO3,
        f"model.name_or_path={tiny_qwen}",
        "trainer.max_epochs=2",
        "+callbacks.probe._target_=tests.training.zero3_probe.ShardingProbe",
        env={"CROSSMOD_RUN_ID": "full"},
    )
    return train_run.log_dir / "synthetic_vlm" / "runs" / "full"


def test_the_model_is_built_sharded_with_transformers_told_and_lora_b_zero(zero3_run):
    for rank in (0, 1):
        probe = json.loads((zero3_run / f"probe_rank{rank}.json").read_text())
        assert probe["partitioned"] == probe["parameters"] > 0  # every parameter, heads included
        assert probe["local_numel"] <= probe["full_numel"] // 2 + 64  # each rank holds its half
        assert probe["transformers_zero3"] is True
        assert probe["lora_b_tensors"] > 0 and probe["lora_b_abs_sum_at_start"] == 0.0


def test_checkpoints_are_sharded_and_the_best_one_is_scored_exactly(zero3_run):
    metrics = json.loads((zero3_run / "metrics.json").read_text())
    best = Path(metrics["best_checkpoint"])
    shards = sorted(p.name for p in (best / "checkpoint").iterdir())
    assert any("zero_pp_rank_0_" in name for name in shards) and any("zero_pp_rank_1_" in name for name in shards)
    history = _val_history(zero3_run)
    best_epoch = int(best.name.removeprefix("epoch").removesuffix(".ckpt"))
    # the best checkpoint's weights restored into the sharded model score what that epoch scored
    assert metrics["best"]["val"]["mean"]["auroc"] == pytest.approx(history[best_epoch], abs=1e-6)
    # every selection-set meme (the dataset's own validation split) and every held-out meme scored once,
    # although ranks held different numbers of batches
    ids = {key[0] for key in _val_probabilities(zero3_run)}
    manifest = json.loads((zero3_run / "manifest.json").read_text())
    assert len(ids) == manifest["counts"]["split"]["val"] and metrics["selection"]["rule"] == "val_split"
    (folds,) = [entry for entry in manifest["folds"] if entry["num_folds"] == 3]
    tested = [row["id"] for row in csv.DictReader(open(zero3_run / "predictions" / "test.csv"))]
    assert len(set(tested)) == folds["samples_per_fold"][0] and len(tested) == len(set(tested)) * 5


def test_consolidated_weights_and_gathered_adapter_agree_and_reload_to_the_same_scores(zero3_run, tmp_path):
    metrics = json.loads((zero3_run / "metrics.json").read_text())
    summary = consolidate(metrics["best_checkpoint"], tmp_path / "best.safetensors")
    consolidated = load_file(str(tmp_path / "best.safetensors"))
    assert summary["tensors"] == len(consolidated) > 0
    # exclude_frozen_parameters: the LoRA weights and heads, nothing of the frozen base
    assert all("lora_" in key or key.startswith("head_layers.") for key in consolidated), sorted(consolidated)[:5]
    assert all(value.numel() > 0 for value in consolidated.values())

    adapter = load_file(str(Path(metrics["adapter"]) / "adapter_model.safetensors"))
    lora = {k.removeprefix("backbone.model.").replace(".default.", "."): v for k, v in consolidated.items() if "lora_" in k}
    assert set(adapter) == set(lora)
    for key, value in adapter.items():
        assert value.numel() > 0 and torch.equal(value, lora[key]), key

    # rebuilt on one process from the sharded checkpoint, the model gives the ZeRO-3 run's validation scores
    model, _ = load(zero3_run, "best")
    fresh, _ = load(zero3_run, str(tmp_path / "best.safetensors"))
    scored = _val_probabilities(zero3_run)
    samples = _first_val_samples(zero3_run, count=6)
    batch = model.preprocessor.collate([model.preprocessor(s) for s in samples])
    with torch.no_grad():
        logits, logits_fresh = model(batch), fresh(batch)
    for head in model.heads:
        assert torch.allclose(logits[head], logits_fresh[head])
        probs = torch.sigmoid(logits[head]).tolist()
        expected = [scored[(s["id"], head)] for s in samples]
        assert probs == pytest.approx(expected, abs=1e-5)

    # export.py from the consolidated file: a PEFT culture folder giving the same DE logits
    result = run_python(
        [
            sys.executable,
            str(ROOT / "export.py"),
            f"run={zero3_run}",
            f"checkpoint={tmp_path / 'best.safetensors'}",
            "culture=DE",
            f"out={tmp_path / 'export'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    culture, _ = load(tmp_path / "export" / "DE")
    with torch.no_grad():
        assert torch.allclose(culture(batch)["DE"], logits["DE"], atol=1e-5)


def _first_val_samples(run: Path, count: int) -> list[dict]:
    from crossmod.data.shards import read_samples

    scored_ids = {key[0] for key in _val_probabilities(run)}
    manifest = json.loads((run / "manifest.json").read_text())
    shard_root = OmegaConf.load(run / "config.yaml").data.shard_root
    shard_dir = Path(shard_root) / f"{manifest['dataset']}-{manifest['fingerprint']}"
    samples = [s for s in read_samples(shard_dir, ["train", "val", "test"]) if s["id"] in scored_ids]
    return samples[:count]


def test_resume_from_a_sharded_checkpoint_is_exact(zero3_run, data_dir, tiny_qwen, tmp_path):
    from tests.conftest import TrainRun

    train_run = TrainRun(data_dir, tmp_path / "runs")
    common = (*ZERO3, f"model.name_or_path={tiny_qwen}", "test=false")
    train_run(*common, "trainer.max_epochs=1", "keep_resume_checkpoints=true", env={"CROSSMOD_RUN_ID": "first"})
    last = train_run.log_dir / "synthetic_vlm" / "runs" / "first" / "checkpoints" / "last.ckpt"
    assert (last / "latest").is_file()
    train_run(*common, "trainer.max_epochs=2", f"ckpt_path={last}", env={"CROSSMOD_RUN_ID": "resumed"})
    resumed = train_run.log_dir / "synthetic_vlm" / "runs" / "resumed"
    # the resumed epoch (optimizer, scheduler, data position restored) matches the uninterrupted run's
    assert _val_history(resumed)[1] == pytest.approx(_val_history(zero3_run)[1], abs=1e-6)


@pytest.fixture(scope="module")
def verbalizer_run(tmp_path_factory, data_dir, tiny_qwen) -> Path:
    """A verbalizer-mode run trained on one process: its best checkpoint is a Lightning .ckpt file."""
    from tests.conftest import TrainRun

    train_run = TrainRun(data_dir, tmp_path_factory.mktemp("verbalizer") / "runs")
    plain = [o for o in ZERO3 if o not in ("strategy=deepspeed_zero3", "trainer=ddp_cpu")]
    train_run(
        *plain, f"model.name_or_path={tiny_qwen}", "model.fusion.mode=verbalizer", "trainer.max_epochs=1", env={"CROSSMOD_RUN_ID": "v"}
    )
    return train_run.log_dir / "synthetic_vlm" / "runs" / "v"


@pytest.mark.parametrize("mode", ["head", "verbalizer"])
def test_evaluate_under_zero3_scores_what_one_process_does(mode, request, data_dir, tmp_path):
    """`evaluate.py ckpt=<run> strategy=deepspeed_zero3` on two CPU ranks, for a head run trained under ZeRO-3 (sharded
    checkpoint directory) and a verbalizer run trained on one process (.ckpt file): the model is rebuilt in partitions,
    the checkpoint's weights go in, every held-out meme is scored once (the ranks padded to equal counts, every forward a
    collective) and the rows equal one process's."""
    run = request.getfixturevalue("zero3_run" if mode == "head" else "verbalizer_run")
    common = (f"ckpt={run}", f"paths.data_dir={data_dir}", *SMALL_DATA, "batch_size=1")
    evaluations = {}
    for name, extra in (("one", ()), ("zero3", ("trainer=ddp_cpu", "strategy=deepspeed_zero3"))):
        extra += ("trainer.strategy.config.zero_optimization.stage3_param_persistence_threshold=0",) if extra else ()
        evaluations[name] = run_python(
            [sys.executable, str(ROOT / "evaluate.py"), *common, *extra, f"out={tmp_path / name}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=scaled(600),
        )
        assert evaluations[name].returncode == 0, evaluations[name].stderr[-4000:]
    log = evaluations["zero3"].stdout + evaluations["zero3"].stderr
    assert "MEMBER: 2/2" in log and "built in ZeRO-3 partitions across 2 ranks" in log
    one, zero3 = (list(csv.DictReader(open(tmp_path / name / "predictions" / f"{run.name}.csv"))) for name in ("one", "zero3"))
    assert [r["id"] for r in one] == [r["id"] for r in zero3]
    assert len(one) % 2 == 1  # one meme per forward: unpadded, the ranks would run different numbers of forwards
    for a, b in zip(one, zero3):
        for key in a:
            if key.endswith("_probability"):
                assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-5), (a["id"], key)
            else:
                assert a[key] == b[key], (a["id"], key)


BF16_STEPS = ("trainer.max_epochs=1", "+trainer.limit_train_batches=3", "+trainer.limit_val_batches=2", "test=false")


def test_bf16_lora_trains_under_zero3(tmp_path, data_dir, tiny_qwen):
    """`trainer.precision=bf16-mixed` with a bf16 base under ZeRO-3, as `trainer=gpu` runs it: the LoRA layers are
    partitioned as they are built, in bf16, and must stay so. PEFT's default upcast of adapter weights to fp32 reached
    only the empty placeholders, and the run broke: on an H200 in DeepSpeed's optimizer (partitions of mixed dtypes),
    on CPU in the first forward (a LoRA weight gathered empty)."""
    from tests.conftest import TrainRun

    train_run = TrainRun(data_dir, tmp_path / "runs")
    train_run(
        *ZERO3,
        f"model.name_or_path={tiny_qwen}",
        "trainer.precision=bf16-mixed",
        "model.fusion.dtype=bfloat16",
        *BF16_STEPS,
        env={"CROSSMOD_RUN_ID": "bf16"},
    )
    _assert_trained_three_steps(train_run.log_dir / "synthetic_vlm" / "runs" / "bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["ddp", "deepspeed_zero3"])
def test_lora_trains_on_one_gpu(strategy, tmp_path, data_dir, tiny_qwen):
    """The GPU path a user runs (`trainer=gpu`: bf16-mixed, bf16 base, SDPA or flash attention) under DDP and ZeRO-3."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from tests.conftest import TrainRun

    plain = [o for o in ZERO3 if o not in ("strategy=deepspeed_zero3", "trainer=ddp_cpu")]
    train_run = TrainRun(data_dir, tmp_path / "runs")
    train_run(
        *plain, "trainer=gpu", f"strategy={strategy}", f"model.name_or_path={tiny_qwen}", *BF16_STEPS, env={"CROSSMOD_RUN_ID": strategy}
    )
    _assert_trained_three_steps(train_run.log_dir / "synthetic_vlm" / "runs" / strategy)


def _assert_trained_three_steps(run: Path) -> None:
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["global_step"] == 3
    assert math.isfinite(metrics["best"]["val"]["all"]["loss"])

"""Strategy configs compose into the strategies and DeepSpeed configs they promise; eval batches stay in lockstep."""

from __future__ import annotations

import threading

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from lightning.pytorch.strategies import DDPStrategy

import crossmod.runtime.resolvers  # noqa: F401  (registers ${is_bf16:} …)
from crossmod.data.even_batches import FILLER, EvenBatches
from crossmod.runtime.strategies import DeepSpeedStrategy, _kept_whole_by_zero3, place_unpartitioned_state
from tests.conftest import ROOT, scaled

DEEPSPEED = ("deepspeed_zero2", "deepspeed_zero3", "deepspeed_zero3_offload")


def strategy_of(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["paths.data_dir=/tmp/unused", *overrides])
    return cfg, instantiate(cfg.trainer.strategy)


@pytest.mark.parametrize("name", DEEPSPEED)
@pytest.mark.parametrize("trainer, bf16", [("gpu", True), ("cpu", False)])
def test_deepspeed_strategies_carry_a_deepspeed_config_that_follows_the_run(name, trainer, bf16):
    cfg, strategy = strategy_of(f"strategy={name}", f"trainer={trainer}", "data.batch_size=12")
    assert isinstance(strategy, DeepSpeedStrategy) and isinstance(strategy.config, dict)
    config = strategy.config
    stage = 2 if name == "deepspeed_zero2" else 3
    assert config["zero_optimization"]["stage"] == stage and strategy.zero_stage_3 == (stage == 3)
    assert config["bf16"]["enabled"] is bf16  # follows trainer.precision, no second switch to forget
    assert config["train_micro_batch_size_per_gpu"] == 12  # follows data.batch_size
    assert "gradient_accumulation_steps" not in config  # Lightning sets it from trainer.accumulate_grad_batches
    assert strategy.exclude_frozen_parameters is True  # LoRA checkpoints without the frozen base
    assert set(config["activation_checkpointing"]) >= {"partition_activations", "cpu_checkpointing"}
    offload = config["zero_optimization"].get("offload_param", {}).get("device")
    assert offload == ("cpu" if name.endswith("offload") else None)
    # DeepSpeed's own parser accepts it (with the accumulation Lightning adds at setup)
    from deepspeed.runtime.config import DeepSpeedConfig

    parsed = DeepSpeedConfig({**config, "gradient_accumulation_steps": 1})
    assert parsed.zero_optimization_stage == stage and parsed.bfloat16_config.enabled is bf16
    assert (parsed.zero_config.offload_param is not None) == name.endswith("offload")


def test_ddp_strategy_and_the_cpu_ddp_trainer():
    cfg, strategy = strategy_of("strategy=ddp")
    assert isinstance(strategy, DDPStrategy) and strategy._ddp_kwargs["broadcast_buffers"] is False
    cfg, strategy = strategy_of("trainer=ddp_cpu")  # the trainer picks the ddp strategy by default …
    assert isinstance(strategy, DDPStrategy) and cfg.trainer.devices == 2
    cfg, strategy = strategy_of("trainer=ddp_cpu", "strategy=deepspeed_zero3")  # … which the command line overrides
    assert isinstance(strategy, DeepSpeedStrategy)


def test_no_strategy_leaves_lightnings_choice():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["paths.data_dir=/tmp/unused"])
    assert "strategy" not in cfg.trainer


def _run_ranks(streams: list[list[dict]]) -> list[list[dict]]:
    """Each stream's EvenBatches on its own thread, with a barrier-based sum standing in for all-reduce."""
    flags: list[bool] = [False] * len(streams)
    barrier = threading.Barrier(len(streams))
    results: list[list[dict]] = [[] for _ in streams]

    def reducer(rank: int):
        def any_rank(flag: bool) -> bool:
            flags[rank] = flag
            barrier.wait()
            answer = any(flags)
            barrier.wait()
            return answer

        return any_rank

    def consume(rank: int) -> None:
        spare = {"ids": ["spare"], "x": -1}
        results[rank] = list(EvenBatches(streams[rank], reducer(rank), lambda: spare))

    threads = [threading.Thread(target=consume, args=(rank,)) for rank in range(len(streams))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(10))
    return results


def test_even_batches_pad_short_ranks_with_flagged_fillers():
    batches = [{"ids": [f"r0-{i}"], "x": i} for i in range(3)]
    long, short, empty = _run_ranks([batches, batches[:1], []])
    assert len(long) == len(short) == len(empty) == 3  # same number of forward passes on every rank
    assert long == batches and not any(FILLER in b for b in long)
    assert short[0] == batches[0] and all(b[FILLER] and b["x"] == 0 for b in short[1:])
    assert all(b[FILLER] and b["ids"] == ["spare"] for b in empty)  # a rank given no shards reads a spare batch


def test_submitit_launcher_config_follows_the_trainer():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=["paths.data_dir=/tmp/unused", "hydra/launcher=slurm", "trainer=ddp_cpu", "trainer.num_nodes=3"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node) == (3, 2)  # one SLURM task per trainer process
    assert launcher.additional_parameters.signal == "USR1@90"  # the signal crossmod's requeue handles


def test_zero3_places_metric_states_and_buffers_but_not_parameters():
    """ZeRO-3 leaves everything but its partitions where it was made; the strategy moves metric states and buffers to
    the rank's device (the meta device stands in for a GPU here) and leaves parameters to DeepSpeed."""
    import torch
    from torch import nn
    from torchmetrics import MeanMetric

    module = nn.Module()
    module.losses = nn.ModuleDict({"val": MeanMetric()})
    module.layer = nn.Linear(2, 2)
    module.layer.register_buffer("scale", torch.ones(2))
    place_unpartitioned_state(module, torch.device("meta"))
    assert module.losses["val"].mean_value.device.type == "meta"
    assert module.layer.scale.device.type == "meta"
    assert module.layer.weight.device.type == "cpu"


def test_zero3_brings_back_the_parameters_it_keeps_whole_after_a_teardown():
    """Lightning's teardown moves the module to the CPU between fit and validate; ZeRO-3's persistent parameters (kept
    gathered, never fetched again) must come back to the device, its partitions' placeholders must not be touched."""
    import torch
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from torch import nn

    module = nn.Module()
    module.norm = nn.Linear(2, 2)
    module.big = nn.Linear(2, 2)
    for parameter in module.norm.parameters():  # persistent: gathered at engine start and kept so
        parameter.ds_id, parameter.ds_status = 1, ZeroParamStatus.AVAILABLE
    for parameter in module.big.parameters():  # partitioned: an empty placeholder until the next fetch
        parameter.ds_id, parameter.ds_status = 2, ZeroParamStatus.NOT_AVAILABLE
        parameter.data = torch.empty(0)
    module.register_parameter("plain", nn.Parameter(torch.ones(2)))  # not (yet) converted by DeepSpeed: the engine's
    # The meta device cannot take a parameter's data in place (`.data =` needs the same tensor type), so the choice is
    # checked here and the move itself on a GPU (tests/training/test_zero3.py::test_lora_trains_on_one_gpu).
    chosen = [name for name, parameter in module.named_parameters() if _kept_whole_by_zero3(parameter)]
    assert chosen == ["norm.weight", "norm.bias"]

"""The memory plan's logic: LoRA-aware model states on a hand-computed case, DeepSpeed's estimators feeding the
table, the activation formula against saved-tensor bytes measured on CPU, and the docs table as the rendering
of the committed result (no number typed)."""

from __future__ import annotations

import json

import pytest
import torch

from bench.activation_memory import (
    SMOKE_VALIDATION,
    Dims,
    alive_storage_bytes,
    held_bytes,
    measure_held_bytes,
    meme_batch,
    save_random_model,
    small_config,
    validate,
)
from bench.memory_plan import (
    GIB,
    PUBLISHED,
    count_parameters,
    deepspeed_estimates,
    lora_model_states,
    lora_parameters,
    plan,
    printed_estimates,
)
from bench.memory_plan_docs import DOCS, END, START, docs_block
from tests.conftest import ROOT

# 1000 frozen, 40 LoRA + 10 head parameters, 100 of them below the persistence threshold, largest layer 200.
COUNTS = {"base": 1000, "lora": 40, "heads": 10, "trainable": 50, "total": 1050, "persistent": 100, "largest_layer": 200}


def test_lora_aware_model_states_hand_computed():
    # 8 GPUs, one node
    assert lora_model_states(COUNTS, "ddp", 8) == {"gpu": 2 * 1000 + 16 * 50, "host_per_node": 0}  # 2800
    assert lora_model_states(COUNTS, "zero2", 8)["gpu"] == pytest.approx(2100 + 112.5)  # bf16 of all 1050; 18 B × 50 / 8
    # 950 partitioned bf16 / 8 + 100 persistent bf16 + 18 × 50 / 8 + 4 × 200
    assert lora_model_states(COUNTS, "zero3", 8)["gpu"] == pytest.approx(237.5 + 200 + 112.5 + 800)
    assert lora_model_states(COUNTS, "zero3_offload", 8) == {"gpu": 200 + 800, "host_per_node": 1900 + 900}
    # 16 GPUs = two nodes of 8: each host keeps half
    assert lora_model_states(COUNTS, "zero3_offload", 16)["host_per_node"] == 1400
    assert lora_model_states(COUNTS, "zero3", 16)["gpu"] == pytest.approx(950 * 2 / 16 + 200 + 18 * 50 / 16 + 800)
    with pytest.raises(ValueError, match="unknown strategy"):
        lora_model_states(COUNTS, "fsdp", 8)


def test_lora_count_matches_peft_and_hand_count():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from crossmod.models.vlm.families import family_named

    config = small_config("qwen2_vl", hidden=64, layers=2, heads=4, kv_heads=2, vision_width=32, vision_depth=1)
    model = AutoModelForImageTextToText.from_config(config)
    # q: 8·(64 + 64); v: 8·(64 + 2·16); two layers; the vision tower has no q_proj/v_proj of its own to catch
    counted = lora_parameters(model, "qwen2_vl")
    assert counted == 2 * (8 * 128 + 8 * 96)
    model.requires_grad_(False)
    peft = get_peft_model(model, LoraConfig(target_modules=family_named("qwen2_vl").targets("qv"), r=8, lora_alpha=16))
    assert sum(p.numel() for p in peft.parameters() if p.requires_grad) == counted


def test_published_7b_lora_and_heads_counted():
    counts = count_parameters(PUBLISHED[0])  # Qwen2-VL-7B: 28 layers, hidden 3584, 4 kv heads of 128
    assert counts["lora"] == 28 * (8 * (3584 + 3584) + 8 * (3584 + 512))
    assert counts["heads"] == 5 * 3584 + 5
    assert counts["largest_layer"] == 152064 * 3584  # the embedding (and the untied LM head)
    assert counts["total"] == counts["base"] + counts["lora"] + counts["heads"]


def test_deepspeed_estimators_hand_case_and_printout():
    estimates = deepspeed_estimates(total=1_000_000, largest_layer=100_000, gpus=8)
    assert estimates["zero2"]["gpu"] == 2 * 1_000_000 + 18 * 1_000_000 // 8
    assert estimates["zero3"]["gpu"] == 4 * 100_000 + 18 * 1_000_000 // 8
    assert estimates["zero3_offload"]["gpu"] == 4 * 100_000
    shown = printed_estimates(estimates["printout"])  # what `_all_cold` printed, in GB
    assert shown["offload_param=none,offload_optimizer=none,zero_init=1"][1] == f"{estimates['zero3']['gpu'] / GIB:.2f}"


def test_deepspeed_numbers_land_in_the_table():
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    result = plan(gpu_counts=(8,), published=PUBLISHED[:1])
    model = result["models"][0]
    rows = {(r["strategy"], r["checkpointing"]): r for r in result["rows"]}
    assert len(rows) == 8 and rows[("DDP", False)]["deepspeed_states_gib"] is None
    _, zero2 = estimate_zero2_model_states_mem_needs(model["total"], num_gpus_per_node=8, num_nodes=1, cpu_offload=False)
    _, zero3, _ = estimate_zero3_model_states_mem_needs(
        model["total"], model["largest_layer"], num_gpus_per_node=8, num_nodes=1, cpu_offload=False, cpu_offload_params=False
    )
    _, offload, _ = estimate_zero3_model_states_mem_needs(model["total"], model["largest_layer"], num_gpus_per_node=8, num_nodes=1)
    for checkpointing in (False, True):
        assert rows[("ZeRO-2", checkpointing)]["deepspeed_states_gib"] == zero2 / GIB
        assert rows[("ZeRO-3", checkpointing)]["deepspeed_states_gib"] == zero3 / GIB
        assert rows[("ZeRO-3 + offload", checkpointing)]["deepspeed_states_gib"] == offload / GIB
    row = rows[("ZeRO-3", True)]
    assert row["total_gib"] == pytest.approx(row["lora_states_gib"] + row["activations_gib"])
    assert row["fits"] == (row["total_gib"] <= result["capacity_gib"] - result["headroom_gib"])


def test_activation_formula_matches_saved_tensor_bytes_on_two_sizes():
    rows = validate(SMOKE_VALIDATION)
    assert {r["size"] for r in rows} == {"A", "B"} and len(rows) == 8
    for row in rows:
        assert row["measured_bytes"] > 0
        assert abs(row["formula_over_measured"] - 1) <= 0.10, row
    by = {(r["size"], r["regime"], r["checkpointing"]): r["measured_bytes"] for r in rows}
    assert by[("B", "bf16", True)] < by[("B", "bf16", False)]  # checkpointing holds less
    assert by[("B", "mixed", False)] > by[("B", "bf16", False)]  # fp32 adapters keep fp32 dropout masks


def test_only_storages_still_alive_are_held():
    """Seen and freed (a frozen checkpointed block's input) is not held; a view counts its storage once; a
    parameter is a model state."""
    import weakref

    layer = torch.nn.Linear(4, 4)
    kept, freed = torch.zeros(10), torch.zeros(100)
    seen = [weakref.ref(t) for t in (kept, kept[:5], freed, layer.weight)]
    del freed
    assert alive_storage_bytes(seen, excluded=(layer,)) == 10 * 4


def test_measurement_tells_the_regimes_apart(tmp_path):
    """The measurement is sharp enough to reject a wrong formula: the `mixed` prediction misses `bf16` by > 3 %."""
    size = SMOKE_VALIDATION[1]
    config = small_config(size.family, size.hidden, size.layers, size.heads, size.kv_heads, size.vision_width, size.vision_depth)
    folder = save_random_model(config, tmp_path / "model")
    batch = meme_batch(config, size.grid, size.text_tokens)
    measured = measure_held_bytes(folder, batch, "bf16", checkpointing=False)
    wrong = held_bytes(Dims.from_config(config), batch["input_ids"].shape[1], "mixed", False)
    assert abs(wrong / measured - 1) > 0.03
    with pytest.raises(ValueError, match="regime"):
        measure_held_bytes(folder, batch, "fp16", checkpointing=False)
    assert torch.is_grad_enabled()


def test_docs_table_is_the_rendering_of_the_committed_result():
    result = json.loads((ROOT / "bench" / "results" / "memory_plan.json").read_text())
    assert result["smoke"] is False and result["met"] is True
    text = DOCS.read_text()
    assert text.split(START, 1)[1].split(END, 1)[0].strip() == docs_block(result).strip()

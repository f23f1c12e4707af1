"""FLOPs per meme of the Qwen2-VL LoRA classifier (bench/vlm_flops.py) and the MFU report (bench/mfu.py).

The count is checked three ways: term by term against products written out by hand for Qwen2-VL-7B at
512 px, against torch's FlopCounterMode on a real step of crossmod's VLMClassifier (small random Qwen2-VL
and Qwen2.5-VL, eager and SDPA, head and verbalizer, with and without checkpointing), and the published
configs against the parameter counts on their model cards. The MFU report runs on made-up timings.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from bench.flop_counter_check import agreement_rows
from bench.mfu import CPU_NOMINAL, PEAK_BF16, Peak, format_report, measurement_windows, peak_for, throughput_report
from bench.vlm_configs import named_config, parameter_count
from bench.vlm_flops import DOCS_END, DOCS_START, FlopCount, Term, _window_square, count_flops, image_grid, tower_share, tower_share_table
from tests.conftest import ROOT, scaled
from tests.zygote import run_python


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return agreement_rows()


def test_the_count_agrees_with_flop_counter_mode_within_two_percent(rows):
    cases = {(r["model_type"], r["attention"], r["pass"]) for r in rows}
    for model_type in ("qwen2_vl", "qwen2_5_vl"):  # forward and forward+backward, eager and SDPA, LoRA q,v r 8
        for attention in ("eager", "sdpa"):
            assert {(model_type, attention, "forward"), (model_type, attention, "forward+backward")} <= cases
    for row in rows:
        assert abs(row["relative_difference"]) <= 0.02, row
        assert row["counted"] > 0


def test_sdpa_counts_the_fused_backward_extra_and_eager_does_not(rows):
    by_case = {(r["model_type"], r["attention"], r["readout"], r["gradient_checkpointing"], r["pass"]): r for r in rows}
    eager = by_case[("qwen2_vl", "eager", "head", False, "forward+backward")]
    sdpa = by_case[("qwen2_vl", "sdpa", "head", False, "forward+backward")]
    assert eager["of_which_fused_attention_extra"] == 0 and sdpa["of_which_fused_attention_extra"] > 0
    # same model and inputs: the counter's difference between the two is exactly the fused kernel's extra work
    assert sdpa["counted"] - eager["counted"] == sdpa["of_which_fused_attention_extra"]
    checkpointed = by_case[("qwen2_vl", "eager", "head", True, "forward+backward")]
    assert checkpointed["counted"] - eager["counted"] == checkpointed["of_which_recompute"] > 0


def test_qwen2_vl_7b_at_512_px_term_by_term():
    count = count_flops("qwen2-vl-7b", image_size=512, text_tokens=64, lora="qv", lora_rank=8, readout="head", head_outputs=5)
    # 512 px → 504 px (nearest multiple of 14·2); 36×36 patches of 14 px; 2×2 merged → 324 image tokens; + 64 text
    assert (count.image_height, count.image_width, count.patches, count.image_tokens, count.sequence) == (504, 504, 1296, 324, 388)
    terms = {(t.component, t.name.split(" (")[0]): t for t in count.terms}
    S, D, KV, F, L, r = 388, 3584, 512, 18944, 28, 8  # KV = 4 k/v heads × head dim 128
    n, E = 1296, 1280  # patches, vision width (32 blocks, MLP 4×1280)
    assert terms["vision", "patch embed Conv3d 1176→1280"].forward == 2 * n * (3 * 2 * 14 * 14) * E
    assert terms["vision", "attention qkv + proj"].forward == 2 * 32 * n * (3 * E * E + E * E)
    assert terms["vision", "attention QKᵀ, ·V"].forward == 2 * 32 * (n * n * E + n * n * E)
    assert terms["vision", "MLP fc1/fc2 1280×5120"].forward == 2 * 32 * (n * E * 5120 + n * 5120 * E)
    assert terms["merger", "merger MLP 5120→5120→3584"].forward == 2 * 324 * (5120 * 5120 + 5120 * 3584)
    assert all(t.backward == 0 for t in count.terms if t.component in ("vision", "merger"))  # frozen, nothing before it trains

    projections = terms["llm", "attention q/k/v/o"]
    assert projections.forward == L * 2 * S * (D * D + D * KV + D * KV + D * D)
    # layer 0 sees the frozen embeddings: only o_proj's input (the attention output, made of LoRA q and v) needs a gradient
    assert projections.backward == (L - 1) * 2 * S * (D * D + D * KV + D * KV + D * D) + 2 * S * D * D
    attention = terms["llm", "attention QKᵀ, ·V"]
    assert attention.forward == L * 2 * (S * S * D + S * S * D)  # all 28 query heads × 128, the whole square
    assert attention.backward == (L - 1) * 2 * 4 * S * S * D + 2 * 3 * S * S * D  # dQ dK dP dV; layer 0 has no dK
    mlp = terms["llm", "MLP SwiGLU 3×3584×18944"]
    assert mlp.forward == mlp.backward == L * 2 * 3 * S * D * F
    lora_q, lora_v = terms["lora", "LoRA q_proj r=8"], terms["lora", "LoRA v_proj r=8"]
    assert lora_q.forward == L * 2 * S * r * (D + D) and lora_v.forward == L * 2 * S * r * (D + KV)
    # B: weight gradient + input gradient; A: weight gradient, + input gradient from layer 1 on
    assert lora_q.backward == L * 2 * (2 * S * r * D + S * D * r) + (L - 1) * 2 * S * D * r
    assert lora_v.backward == L * 2 * (2 * S * r * KV + S * D * r) + (L - 1) * 2 * S * D * r
    head = terms["readout", "head layer, last token"]
    assert (head.forward, head.backward) == (2 * D * 5, 4 * D * 5)
    assert count.attention_kernel_extra == (L - 1) * 2 * S * S * D + 2 * 2 * S * S * D
    assert count.recompute == 0
    assert count.train == count.forward + count.backward == sum(t.forward + t.backward for t in count.terms)


def test_checkpointing_recomputes_each_layer_but_its_closing_down_projection():
    plain = count_flops("qwen2-vl-7b", 512, 64)
    checkpointed = count_flops("qwen2-vl-7b", 512, 64, gradient_checkpointing=True)
    assert checkpointed.train == plain.train  # model FLOPs unchanged: recomputation is reported apart
    language_model = sum(t.forward for t in plain.terms if t.component in ("llm", "lora"))
    assert checkpointed.recompute == language_model - 28 * 2 * 388 * 18944 * 3584


def test_qwen2_5_vl_windows_by_hand_and_as_transformers_builds_them():
    from transformers.vision_utils import get_vision_window_index

    # 36×36 patches → 18×18 merged tokens; windows of 112 px = 4×4 merged tokens: sides 4,4,4,4,2
    assert _window_square(36, 36, window=4, merge=2) == 2**4 * (4 * 16 + 4) ** 2
    for grid in ((36, 36), (36, 20), (32, 32)):
        _, cu = get_vision_window_index(torch.tensor([[1, *grid]]), spatial_merge_size=2, window_size=112, patch_size=14)
        lengths = (cu[1:] - cu[:-1]).tolist()
        assert _window_square(*grid, window=4, merge=2) == sum(length * length for length in lengths)


def test_image_grid_follows_the_processor_resize():
    config = named_config("qwen2-vl-7b")
    assert image_grid(config, 512) == (504, 504)
    assert image_grid(config, 224) == (224, 224)
    assert image_grid(config, (300, 1000)) == (308, 1008)  # each side to its nearest multiple of 28
    height, width = image_grid(config, 2000)  # above max_pixels 28·28·1280: scaled down
    assert height * width <= 28 * 28 * 1280 and height % 28 == width % 28 == 0


def test_published_configs_are_the_released_models():
    """Parameter counts of the configs equal the sizes on the model cards (safetensors metadata)."""
    assert round(parameter_count(named_config("qwen2-vl-7b")) / 1e9, 2) == 8.29  # Qwen/Qwen2-VL-7B-Instruct: 8.29B
    # Qwen/Qwen2.5-VL-72B-Instruct: 73.4B; the 4-bit copies' padded intermediate_size 29696 would give 73.7B
    assert round(parameter_count(named_config("qwen2.5-vl-72b")) / 1e9, 1) == 73.4
    seven = named_config("qwen2.5-vl-7b")
    assert (seven.vision_config.depth, seven.vision_config.hidden_size, seven.vision_config.intermediate_size) == (32, 1280, 3420)
    assert seven.vision_config.out_hidden_size == seven.get_text_config().hidden_size == 3584


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="vision_qkv"):
        count_flops("qwen2-vl-7b", lora=["q", "vision_qkv"])
    with pytest.raises(ValueError, match="readout"):
        count_flops("qwen2-vl-7b", readout="logits")
    with pytest.raises(ValueError, match="text_tokens"):
        count_flops("qwen2-vl-7b", text_tokens=0)
    with pytest.raises(ValueError, match="qwen2-vl-7b"):
        named_config("qwen3-vl-8b")


# ------------------------------------------------------------------------------------------------ MFU
def test_peak_figures_per_device_name():
    expected = {
        "NVIDIA H100 80GB HBM3": 989.4,
        "NVIDIA H100 PCIe": 756.0,
        "NVIDIA H100 NVL": 835.5,
        "NVIDIA GH200 480GB": 989.4,
        "NVIDIA H200": 989.4,
        "NVIDIA A100-SXM4-80GB": 312.0,
        "NVIDIA A100 80GB PCIe": 312.0,
        "NVIDIA L40S": 362.05,
        "NVIDIA L40": 181.05,
        "NVIDIA A10": 125.0,
        "NVIDIA GeForce RTX 4090": 165.2,
    }
    for name, tflops in expected.items():
        assert peak_for(name).tflops == tflops, name
    for unknown in ("NVIDIA A10G", "Tesla V100-SXM2-32GB", "Tesla T4"):
        assert peak_for(unknown) is None, unknown
    assert all(peak.source and peak.is_gpu for _, peak in PEAK_BF16)


def _made_up_count() -> FlopCount:
    count = FlopCount("made up", 504, 504, 1200, 300, 100, "head", ("q", "v"), 8, terms=[Term("llm", "x", 2 * 10**12, 10**12)])
    count.attention_kernel_extra, count.recompute = 5 * 10**11, 0
    return count


def test_mfu_report_on_made_up_timings():
    h100 = peak_for("NVIDIA H100 80GB HBM3")
    report = throughput_report(
        _made_up_count(), memes=64, seconds=8.0, devices=4, peak=h100, fused_attention=True, peak_memory_bytes=5 * 2**30
    )
    assert report["memes_per_s"] == 8.0 and report["tokens_per_s"] == 8.0 * 400
    assert report["achieved_model_tflops_per_device"] == pytest.approx(3.0 * 8 / 4)  # 3 TFLOPs per meme, 2 memes/s per device
    assert report["mfu"] == pytest.approx(6.0 / 989.4)
    assert report["hfu"] == pytest.approx(3.5 * 8 / 4 / 989.4)  # + the fused attention backward's extra 0.5
    assert report["peak_is_gpu_figure"] is True
    unfused = throughput_report(_made_up_count(), memes=64, seconds=8.0, devices=4, peak=h100, fused_attention=False)
    assert unfused["hfu"] == unfused["mfu"]
    assert "MFU 0.6% (HFU 0.7%) of H100 SXM 989.4 TFLOP/s" in format_report("ddp", report)
    unknown = throughput_report(_made_up_count(), memes=64, seconds=8.0, devices=4, peak=None)
    assert unknown["mfu"] is None and "MFU n/a" in format_report("ddp", unknown)
    with pytest.raises(ValueError, match="positive"):
        throughput_report(_made_up_count(), memes=0, seconds=1.0, devices=1, peak=h100)


def test_config_to_flops_to_mfu():
    count = count_flops("qwen2-vl-7b", 512, 64)
    report = throughput_report(count, memes=256, seconds=10.0, devices=8, peak=peak_for("NVIDIA H100 80GB HBM3"))
    assert report["mfu"] == pytest.approx(count.train * 25.6 / 8 / 989.4e12)
    # by hand from the breakdown: 12.239 TFLOPs per meme × 3.2 memes/s per GPU = 39.2 TFLOP/s = 3.96 % of 989.4
    assert round(report["mfu"], 4) == 0.0396


def test_a_cpu_run_is_flagged_as_not_a_gpu_figure():
    report = throughput_report(_made_up_count(), memes=2, seconds=1.0, devices=1, peak=CPU_NOMINAL)
    assert report["peak_is_gpu_figure"] is False
    assert "not a GPU result" in format_report("ddp", report)
    assert isinstance(CPU_NOMINAL, Peak) and not CPU_NOMINAL.is_gpu


def test_measurement_windows():
    ends = [10.0, 11.0, 12.0, 12.5, 13.0, 14.0, 15.0, 15.5]  # 8 steps; 1 warm-up → 7 timed, from t=10.0
    assert measurement_windows(ends, warmup=1, count=3, memes_per_step=16) == [
        (32, 2.0),
        (32, 1.0),
        (32, 2.0),
    ]  # 10→12, 12→13, 13→15; step 8 left out
    assert measurement_windows(ends, warmup=2, count=1, memes_per_step=4) == [(24, 4.5)]
    with pytest.raises(ValueError, match="no start mark"):
        measurement_windows(ends, warmup=0, count=1, memes_per_step=4)
    with pytest.raises(ValueError, match="cannot make 9 windows"):
        measurement_windows(ends, warmup=1, count=9, memes_per_step=16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_the_gpu_script_refuses_a_machine_without_cuda():
    done = run_python([sys.executable, "bench/gpu_throughput.py"], cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 2
    assert "needs a CUDA device" in done.stderr and "--cpu-smoke" in done.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_gpu_script_measures_on_cuda(tmp_path):
    import importlib.util

    strategies = "ddp,deepspeed_zero3" if importlib.util.find_spec("deepspeed") else "ddp"
    out = tmp_path / "gpu_throughput.json"
    command = [sys.executable, "bench/gpu_throughput.py", "--smoke", "--devices", "1", "--strategies", strategies, "--out", str(out)]
    done = run_python(command, cwd=ROOT, capture_output=True, text=True, timeout=scaled(900), env={**os.environ, "WANDB_MODE": "disabled"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    for name in strategies.split(","):
        variant = result["variants"][name]
        assert variant["memes_per_s"] > 0 and variant["peak_memory_bytes"] > 0
        assert variant["peak_is_gpu_figure"] == (variant["peak"] is not None)


def test_the_tower_share_is_its_forward_over_the_step_and_the_docs_show_the_committed_count():
    count = count_flops("qwen2-vl-2b", 512, 64)
    tower = sum(t.forward for t in count.terms if t.component in ("vision", "merger"))
    assert tower > 0 and all(t.backward == 0 for t in count.terms if t.component in ("vision", "merger"))  # frozen: no backward
    share = tower_share(count)
    assert (
        share["tower_share_of_step"] == tower / (count.forward + count.backward) < share["tower_share_of_forward"] == tower / count.forward
    )
    result = json.loads((ROOT / "bench" / "results" / "vlm_flops.json").read_text())
    for name, row in result["all_configs"].items():
        fresh = count_flops(name, result["parameters"]["image_size"], result["parameters"]["text_tokens"])
        assert row["tower_share_of_step"] == pytest.approx(tower_share(fresh)["tower_share_of_step"])
    docs = (ROOT / "docs" / "performance.md").read_text()
    assert docs.split(DOCS_START)[1].split(DOCS_END)[0].strip() == tower_share_table(result)

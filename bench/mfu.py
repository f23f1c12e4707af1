"""Model FLOPs utilisation from a FLOP count and measured time: peak bf16 figures per device, the report.

MFU = achieved model FLOP/s per device ÷ the device's peak dense bf16 FLOP/s. Model FLOPs are
`bench.vlm_flops.count_flops(...).train` per meme (no recomputation, no fused-kernel extra, no padding);
HFU, beside it, adds what the hardware also ran: the fused attention backward's extra and, with gradient
checkpointing, the recomputed forward. Peaks are the vendors' dense (not 2:4-sparse) tensor-core figures;
where a datasheet only prints the sparse figure with a "with sparsity" footnote, half of it is used.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Peak:
    """A device's peak dense bf16 tensor FLOP/s (in TFLOP/s) and where the figure comes from."""

    device: str
    tflops: float
    source: str
    is_gpu: bool = True


H100_PAGE = "NVIDIA H100 Tensor Core GPU datasheet / product page (nvidia.com/en-us/data-center/h100), BF16 Tensor Core"
H200_PAGE = "NVIDIA H200 Tensor Core GPU product page (nvidia.com/en-us/data-center/h200), BF16 Tensor Core"
# Most specific pattern first: "H100 PCIe" and "H100 NVL" before the SXM part's plain "H100", L40S before L40.
PEAK_BF16: tuple[tuple[str, Peak], ...] = (
    (r"H100.*NVL", Peak("H100 NVL", 835.5, f"{H100_PAGE}: 1,671 TFLOPS with sparsity, halved")),
    (r"H100.*PCIe", Peak("H100 PCIe", 756.0, f"{H100_PAGE}: 1,513 TFLOPS with sparsity; NVIDIA H100 whitepaper: 756 dense")),
    (r"GH200", Peak("GH200 (H100 GPU)", 989.4, "NVIDIA GH200 Grace Hopper datasheet: BF16 1,979 TFLOPS with sparsity, halved")),
    (r"H100", Peak("H100 SXM", 989.4, f"{H100_PAGE}: 1,979 TFLOPS with sparsity (SXM); NVIDIA H100 whitepaper: 989.4 dense")),
    (r"H200.*NVL", Peak("H200 NVL", 835.5, f"{H200_PAGE}: 1,671 TFLOPS with sparsity (NVL), halved")),
    (r"H200", Peak("H200 SXM", 989.4, f"{H200_PAGE}: 1,979 TFLOPS with sparsity (SXM), halved")),
    (r"A100", Peak("A100 (SXM4 or PCIe)", 312.0, "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS (624 with sparsity)")),
    (r"L40S", Peak("L40S", 362.05, "NVIDIA L40S datasheet: BF16 Tensor Core 362.05 TFLOPS (733 with sparsity)")),
    (r"L40\b", Peak("L40", 181.05, "NVIDIA L40 datasheet: BF16 Tensor Core 181.05 TFLOPS (362.1 with sparsity)")),
    (r"\bA10\b", Peak("A10", 125.0, "NVIDIA A10 datasheet: BF16 Tensor Core 125 TFLOPS (250 with sparsity)")),
    (
        r"RTX 4090",
        Peak("GeForce RTX 4090", 165.2, "NVIDIA Ada Lovelace architecture whitepaper: peak BF16 tensor, FP32 accumulate, 165.2 dense"),
    ),
)

CPU_NOMINAL = Peak(
    "CPU (nominal)",
    1.0,
    "a round nominal 1 TFLOP/s for the CPU smoke run: not this CPU's rated or measured peak, and not a GPU figure",
    is_gpu=False,
)


def peak_for(device_name: str) -> Peak | None:
    """The peak of a device as `torch.cuda.get_device_name` names it; None for devices not in the table."""
    for pattern, peak in PEAK_BF16:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return peak
    return None


def override_peak(device_name: str, tflops: float) -> Peak:
    """A peak given on the command line (`--peak-tflops`) for a device the table lacks."""
    return Peak(device_name, tflops, "given on the command line (--peak-tflops)")


def measurement_windows(step_ends: list[float], warmup: int, count: int, memes_per_step: int) -> list[tuple[int, float]]:
    """(memes, seconds) of `count` equal windows of the steps after the first `warmup` steps.

    `step_ends`: the wall time at the end of every step; a window of k steps runs from the end of the step
    before it to the end of its last step, so the first step (no mark before it) is always warm-up.
    Steps beyond count × (steps // count) are left out.
    """
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 step (the first step has no start mark), got {warmup}")
    ends = step_ends[warmup - 1 :]
    steps = len(ends) - 1
    if count < 1 or steps < count:
        raise ValueError(f"{steps} measured steps (after {warmup} warm-up steps) cannot make {count} windows")
    size = steps // count
    return [(size * memes_per_step, ends[(i + 1) * size] - ends[i * size]) for i in range(count)]


def throughput_report(
    flops: Any,
    memes: int,
    seconds: float,
    devices: int,
    peak: Peak | None,
    fused_attention: bool = True,
    peak_memory_bytes: int | None = None,
) -> dict[str, Any]:
    """Throughput and utilisation of `memes` trained in `seconds` on `devices` devices.

    `flops`: a `bench.vlm_flops.FlopCount` (per meme). `fused_attention`: the run used SDPA's fused kernels or
    flash-attention 2 (their backward's extra work enters HFU, never MFU).
    """
    if memes <= 0 or seconds <= 0 or devices <= 0:
        raise ValueError(f"memes, seconds and devices must be positive, got {memes}, {seconds}, {devices}")
    memes_per_s = memes / seconds
    model_flops_per_s = flops.train * memes_per_s / devices
    hardware = flops.train + flops.recompute + (flops.attention_kernel_extra if fused_attention else 0)
    hardware_flops_per_s = hardware * memes_per_s / devices
    peak_flops = peak.tflops * 1e12 if peak else None
    return {
        "memes_per_s": memes_per_s,
        "tokens_per_s": memes_per_s * flops.sequence,
        "memes_per_s_per_device": memes_per_s / devices,
        "model_tflops_per_meme": flops.train / 1e12,
        "achieved_model_tflops_per_device": model_flops_per_s / 1e12,
        "achieved_hardware_tflops_per_device": hardware_flops_per_s / 1e12,
        "mfu": model_flops_per_s / peak_flops if peak_flops else None,
        "hfu": hardware_flops_per_s / peak_flops if peak_flops else None,
        "peak": asdict(peak) if peak else None,
        "peak_is_gpu_figure": bool(peak and peak.is_gpu),
        "devices": devices,
        "memes": memes,
        "seconds": seconds,
        "peak_memory_bytes": peak_memory_bytes,
    }


def format_report(name: str, report: dict[str, Any]) -> str:
    """One line per strategy for the console."""
    peak = report["peak"]
    utilisation = f"MFU {report['mfu']:.1%} (HFU {report['hfu']:.1%}) of {peak['device']} {peak['tflops']:g} TFLOP/s" if peak else "MFU n/a"
    if peak and not peak["is_gpu"]:
        utilisation += " [nominal CPU figure, not a GPU result]"
    memory = f", peak memory {report['peak_memory_bytes'] / 2**30:.2f} GiB" if report["peak_memory_bytes"] else ""
    return (
        f"{name}: {report['memes_per_s']:.2f} memes/s, {report['tokens_per_s']:.0f} tokens/s on {report['devices']} device(s), "
        f"{report['achieved_model_tflops_per_device']:.2f} model TFLOP/s per device, {utilisation}{memory}"
    )

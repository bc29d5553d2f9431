"""Device presets for the analytic profile, each with its datasheet source.

Fields: ``peak_tflops`` (dense bf16/fp16 matmul peak, TFLOP/s), ``hbm_gib`` (device memory, GiB),
``p2p_gbps`` (pipeline send/recv bandwidth assumed between stages, GB/s), ``p2p_latency_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import ConfigError


@dataclass(frozen=True)
class Device:
    """One accelerator preset (see module docstring for units)."""

    name: str
    peak_tflops: float
    hbm_gib: float
    p2p_gbps: float
    p2p_latency_ms: float
    source: str


DEVICES: dict[str, Device] = {
    "ascend-910b": Device(
        "ascend-910b", peak_tflops=313.0, hbm_gib=64.0, p2p_gbps=25.0, p2p_latency_ms=0.02,
        source="Huawei Atlas 800T A2 / Ascend 910B datasheet: 313 TFLOPS FP16 (910B3 class), 64 GB HBM2e; "
               "p2p over 200 Gb/s RoCE (25 GB/s)"),
    "h100": Device(
        "h100", peak_tflops=989.0, hbm_gib=80.0, p2p_gbps=50.0, p2p_latency_ms=0.01,
        source="NVIDIA H100 SXM5 datasheet: 989 TFLOPS dense BF16, 80 GB HBM3; p2p over 400 Gb/s NDR IB (50 GB/s)"),
    "h200": Device(
        "h200", peak_tflops=989.0, hbm_gib=141.0, p2p_gbps=50.0, p2p_latency_ms=0.01,
        source="NVIDIA H200 SXM datasheet: 989 TFLOPS dense BF16, 141 GB HBM3e; p2p over 400 Gb/s NDR IB (50 GB/s)"),
    "a100": Device(
        "a100", peak_tflops=312.0, hbm_gib=80.0, p2p_gbps=25.0, p2p_latency_ms=0.01,
        source="NVIDIA A100 SXM4 80GB datasheet: 312 TFLOPS dense BF16; p2p over 200 Gb/s HDR IB (25 GB/s)"),
    "b200": Device(
        "b200", peak_tflops=2250.0, hbm_gib=180.0, p2p_gbps=50.0, p2p_latency_ms=0.01,
        source="NVIDIA HGX B200 datasheet: 2.25 PFLOPS dense FP16/BF16 per GPU (4.5 sparse), 180 GB HBM3e; "
               "p2p over 400 Gb/s NDR IB (50 GB/s)"),
}
ALIASES = {"910b": "ascend-910b", "ascend910b": "ascend-910b", "atlas-a2": "ascend-910b"}


def get_device(name: str) -> Device:
    """Look a preset up by name (case-insensitive; aliases 910b, ascend910b).

    Raises:
        ConfigError: unknown name (rule ``device``), listing the known presets.
    """
    key = name.lower()
    key = ALIASES.get(key, key)
    if key not in DEVICES:
        raise ConfigError(f"unknown device {name!r}; known: {', '.join(sorted(DEVICES))}",
                          field="--device", value=name, rule="device")
    return DEVICES[key]

"""What this machine's CPU can do with floats: the facts the precision choice and every benchmark record.

``cpu_features()`` reads ``/proc/cpuinfo`` (Linux; elsewhere the model is ``"unknown"`` and every flag False).
``native_bf16(features)``: whether the CPU has bf16 dot products in hardware, AVX512-BF16 (``vdpbf16ps``) or
AMX (``amx_bf16`` tiles). On such a CPU oneDNN runs bf16 GEMMs at about twice the fp32 rate (AVX512-BF16) or
far more (AMX); on any other CPU, AVX2-only or AVX-512 without BF16, PyTorch emulates bf16 by converting to
fp32 around fp32 FMAs, which is slower than fp32 itself.
"""
from __future__ import annotations

import os

#: /proc/cpuinfo flags that mean bf16 dot products in hardware
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: the flags ``cpu_features`` reports, under these names
FEATURE_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """``{"model", "cores", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}``: the CPU's model name,
    the cores this process sees and its float features, from the first processor entry of ``cpuinfo``."""
    flags: set[str] = set()
    name = "unknown"
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("model name") and name == "unknown":
                    name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"model": name, "cores": os.cpu_count(), **{f: f in flags for f in FEATURE_FLAGS}}


def native_bf16(features: dict | None = None) -> bool:
    """Whether the CPU of ``features`` (this one when None) has bf16 dot products in hardware."""
    features = cpu_features() if features is None else features
    return any(features.get(f, False) for f in NATIVE_BF16_FLAGS)


def describe_float_features(features: dict) -> str:
    """``"AVX2, AVX-512, AVX512-BF16"``: the float features ``features`` has, or ``"none of AVX2, ..."``."""
    names = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX-BF16"}
    present = [label for flag, label in names.items() if features.get(flag)]
    return ", ".join(present) if present else "none of " + ", ".join(names.values())

"""CPU backend ("cpp"): the OpenMP extension ``ttrl_lightning._C`` built from ``csrc/signals/signals_cpu.cpp``."""
from __future__ import annotations

import math

import torch  # noqa: F401  (loads libc10/libtorch before the extension)

from ttrl_lightning import _C  # noqa: F401  (ImportError here means the extension was not built)

# Tile of the token_stats GEMM: block_m x block_v float32 (16 MiB), cache-friendly and 1/150 of full logits
# at the benchmark size; see benchmarks/kernels/token_stats.py.
BLOCK_V = 4096
BLOCK_M = 1024
# Query x key blocks of the attention loop (two GEMMs per block); 128 x 512 measured best at T=2048, d=128.
BLOCK_Q = 128
BLOCK_K = 512


def token_stats_cpp(hidden, weight, token_ids, bias=None, temperature=1.0):
    return tuple(_C.token_stats(hidden, weight, token_ids, bias, float(temperature), BLOCK_V, BLOCK_M))


def attention_with_mass_cpp(q, k, v, key_groups, num_groups, causal=True, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, mass = _C.attention_with_mass(q, k, v, key_groups, int(num_groups), bool(causal), scale, BLOCK_Q, BLOCK_K)
    return out, mass

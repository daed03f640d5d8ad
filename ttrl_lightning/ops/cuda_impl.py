"""CUDA-extension backend ("cuda"): ``ttrl_lightning._C_cuda`` built from ``csrc/signals/signals_cuda.cu``.

The kernels return per-vocabulary-split partials for token_stats, merged by the epilogue shared with the
Triton backend (:mod:`.vocab_splits`); self-certainty uses the mean-row mat-vec.
"""
from __future__ import annotations

import math

import torch

from ttrl_lightning import _C_cuda  # noqa: F401  (ImportError here means the extension was not built)

from .vocab_splits import finish_token_stats

SPLIT_V = 4096


def token_stats_cuda(hidden, weight, token_ids, bias=None, temperature=1.0):
    part = _C_cuda.token_stats_partials(hidden, weight, token_ids, bias, float(temperature), SPLIT_V)
    return finish_token_stats(part, hidden, weight, token_ids, bias, temperature)


def attention_with_mass_cuda(q, k, v, key_groups, num_groups, causal=True, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, mass = _C_cuda.attention_with_mass(q, k, v, key_groups, int(num_groups), bool(causal), scale)
    return out, mass

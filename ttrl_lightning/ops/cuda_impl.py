"""CUDA-extension backend ("cuda"): ``ttrl_lightning._C_cuda`` built from ``csrc/signals/signals_cuda.cu``.

The kernels return per-vocabulary-split partials for token_stats, merged here exactly as in the Triton
backend; self-certainty uses the mean-row mat-vec.
"""
from __future__ import annotations

import math

import torch

from ttrl_lightning import _C_cuda  # noqa: F401  (ImportError here means the extension was not built)

SPLIT_V = 4096


def merge_vocab_splits(part: torch.Tensor):
    """part: [splits, 4, M] of (max m_i, s_i, t_i, label logit) -> (lse, entropy, label logit), all [M]."""
    m_p, s_p, t_p, zy_p = part.unbind(1)
    m = m_p.amax(0)
    scale = torch.exp(m_p - m)
    s = (s_p * scale).sum(0)
    t = (t_p * scale).sum(0)
    lse = m + torch.log(s)
    return lse, lse - t / s, zy_p.sum(0)


def token_stats_cuda(hidden, weight, token_ids, bias=None, temperature=1.0):
    V = weight.shape[0]
    part = _C_cuda.token_stats_partials(hidden, weight, token_ids, bias, float(temperature), SPLIT_V)
    lse, entropy, zy = merge_vocab_splits(part)
    mean_z = hidden.float() @ weight.mean(0, dtype=torch.float32)
    if bias is not None:
        mean_z = mean_z + bias.float().mean()
    self_certainty = lse - mean_z / float(temperature) - math.log(V)
    logprob = torch.where(token_ids >= 0, zy - lse, torch.zeros_like(lse))
    return logprob, entropy, self_certainty, lse


def attention_with_mass_cuda(q, k, v, key_groups, num_groups, causal=True, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, mass = _C_cuda.attention_with_mass(q, k, v, key_groups, int(num_groups), bool(causal), scale)
    return out, mass

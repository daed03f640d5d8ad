"""VisConf's token-level fusion ablation, calibrated inside every subset (VisConf sec. 7.2, Table 2; D.2).

``Q_i^tok = (1/T_i) sum_t v_t c_t`` with ``c_t = clip((k_t - q_05) / max(q_95 - q_05, eps), 0, 1)`` and the
quantiles pooled over the subset's self-certainty tokens, as for VisConf's ``C_i``
(:mod:`.calibration`). VisConf's own score fuses at the trajectory level, ``Z_i = V_i C_i``; the two differ by
the within-rollout covariance of ``v`` and ``c`` (App. D.2, Eq. 3).

Vectorised like ``C_i``: each rollout's tokens sorted by ``k`` with prefix sums of ``v`` and ``v k`` in that
order, so for the subset's ``a = q_05`` and ``u = a + d``:
``sum_t v_t c_t = (S_vk(a, u) - a S_v(a, u)) / d + S_v(>= u)`` (tokens with ``k <= a`` add 0), where
``S_x(a, u)`` sums ``x`` over the tokens with ``a < k < u``. No subset's tokens are gathered.

Table 6's controls use raw ``k``: aligned token fusion ``(1/T_i) sum_t v_t k_t``
(:func:`raw_token_fusion_means`) and permuted token fusion ``(1/T_i) sum_t v_{pi(t)} k_t`` with ``pi`` a uniformly random permutation of the
rollout's ``T_i`` positions (:func:`permuted_token_fusion_means`; its expectation over ``pi`` is ``V_i K_i``,
App. D.2 Eq. 4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ttrl_lightning.signals import CALIBRATION_QUANTILES
from ttrl_lightning.eval.bon.calibration import SortedTokens, _pooled_quantile

__all__ = ["FusionTokens", "calibrated_token_fusion_means", "raw_token_fusion_means",
           "permuted_token_fusion_means"]


@dataclass
class FusionTokens:
    """Per rollout: self-certainty ``sorted`` ascending ``[Qc, R, T]`` (+inf padded, float32 values as
    float64), prefix sums ``prefix_v`` / ``prefix_vk`` ``[Qc, R, T+1]`` of ``v`` and ``v k`` in that order,
    ``lengths`` ``[Qc, R]``."""

    sorted: Tensor
    prefix_v: Tensor
    prefix_vk: Tensor
    lengths: Tensor

    @classmethod
    def build(cls, k: Tensor, v: Tensor, lengths: Tensor) -> "FusionTokens":
        qc, r, t = k.shape
        valid = torch.arange(t)[None, None, :] < lengths[..., None]
        srt, order = torch.where(valid, k, torch.full_like(k, math.inf)).sort(-1)
        v_sorted = torch.where(valid, v, torch.zeros_like(v)).gather(-1, order).double()
        k_sorted = srt.double().masked_fill(~valid.gather(-1, order), 0.0)
        prefix_v = torch.zeros(qc, r, t + 1, dtype=torch.float64)
        prefix_vk = torch.zeros(qc, r, t + 1, dtype=torch.float64)
        prefix_v[..., 1:] = v_sorted.cumsum(-1)
        prefix_vk[..., 1:] = (v_sorted * k_sorted).cumsum(-1)
        return cls(sorted=srt.double(), prefix_v=prefix_v, prefix_vk=prefix_vk, lengths=lengths)


def calibrated_token_fusion_means(fusion: FusionTokens, tokens: SortedTokens, idx: Tensor, eps: float,
                                  quantiles=CALIBRATION_QUANTILES) -> Tensor:
    """``(1/T_i) sum_t v_t c_t`` of every subset member (module docstring): ``[Qc, S, N]`` float64.

    fusion / tokens: the chunk's :class:`FusionTokens` and :class:`~.calibration.SortedTokens` of
    self-certainty; idx ``[Qc, S, N]``."""
    qc, r, _ = fusion.sorted.shape
    s = idx.shape[1]
    lengths = fusion.lengths
    n_tok = lengths.gather(1, idx.flatten(1)).view_as(idx).sum(-1)
    q_lo = _pooled_quantile(tokens, idx, n_tok, quantiles[0])
    q_hi = _pooled_quantile(tokens, idx, n_tok, quantiles[1])
    d = (q_hi - q_lo).clamp_min(eps)
    a_q = q_lo[:, None, :].expand(qc, r, s).contiguous()
    u_q = (q_lo + d)[:, None, :].expand(qc, r, s).contiguous()
    n_le_a = torch.searchsorted(fusion.sorted, a_q, right=True)
    n_lt_u = torch.searchsorted(fusion.sorted, u_q, right=False)
    s_v = fusion.prefix_v.gather(2, n_lt_u) - fusion.prefix_v.gather(2, n_le_a)
    s_vk = fusion.prefix_vk.gather(2, n_lt_u) - fusion.prefix_vk.gather(2, n_le_a)
    upper = fusion.prefix_v.gather(2, lengths[..., None].expand(qc, r, s)) - fusion.prefix_v.gather(2, n_lt_u)
    means = ((s_vk - a_q * s_v) / d[:, None, :] + upper) / lengths[..., None]  # [Qc, R, S]
    return means.transpose(1, 2).gather(2, idx)


def raw_token_fusion_means(k: Tensor, v: Tensor, lengths: Tensor) -> Tensor:
    """``(1/T_i) sum_t v_t k_t`` with raw self-certainty (App. D.2's aligned token fusion): ``[Q, R]``."""
    valid = torch.arange(k.shape[-1])[None, None, :] < lengths[..., None]
    return (k.double() * v.double()).masked_fill(~valid, 0.0).sum(-1) / lengths.double()


def permuted_token_fusion_means(k: Tensor, v: Tensor, lengths: Tensor, permutations: int = 100,
                                seed: int = 0) -> Tensor:
    """``(1/T_i) sum_t v_{pi_p(t)} k_t`` for ``permutations`` independent uniformly random permutations
    ``pi_p`` of each rollout's valid positions (App. D.2's permuted token fusion): ``[Q, R, P]`` float64.

    k, v ``[Q, R, T]`` (padding ignored), lengths ``[Q, R]``. Each permutation sorts random keys (padding
    keys +inf, so the first ``T_i`` sorted positions are the valid ones in random order); the draws come
    from one generator seeded with ``seed``."""
    q, r, t = k.shape
    valid = torch.arange(t)[None, None, :] < lengths[..., None]
    kk = k.double().masked_fill(~valid, 0.0)
    vv = v.double().masked_fill(~valid, 0.0)
    gen = torch.Generator().manual_seed(seed)
    out = torch.empty(q, r, permutations, dtype=torch.float64)
    for p in range(permutations):
        keys = torch.rand(q, r, t, generator=gen).masked_fill(~valid, math.inf)
        out[..., p] = (vv.gather(-1, keys.argsort(-1)) * kk).sum(-1) / lengths.double()
    return out

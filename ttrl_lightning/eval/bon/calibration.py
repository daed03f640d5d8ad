"""VisConf's calibrated confidence inside every subset, vectorised (VisConf sec. 4.1).

``C_i`` is the token mean of ``clip((k_t - q_05) / max(q_95 - q_05, eps), 0, 1)`` over rollout ``i``'s
self-certainty tokens ``k_t``, with the 5%/95% quantiles pooled over the tokens of the subset's rollouts;
:func:`calibrated_confidence_means` computes it for ``[questions, subsets, N]`` subsets at once.

The pooled quantiles of a subset come from a binary search over the question's globally sorted token
values, using per-rollout cumulative counts (``count(<= v) = sum_{j in subset} cnt_j(v)``); the calibrated
mean ``C_i`` comes from the rollout's sorted tokens and prefix sums (``clip((k - a) / d, 0, 1)`` is 0 below
``a``, 1 from ``a + d`` and linear in between), so no subset's token values are ever gathered.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ttrl_lightning.signals import CALIBRATION_QUANTILES

__all__ = ["SortedTokens", "calibrated_confidence_means"]


@dataclass
class SortedTokens:
    """Per-question token arrays prepared once for every subset and budget.

    ``sorted``: ``[Qc, R, T]`` each rollout's tokens ascending, +inf padded; ``prefix``: ``[Qc, R, T+1]``
    their prefix sums; ``pooled``: ``[Qc, R*T]`` all of a question's tokens ascending (+inf last);
    ``counts``: ``[Qc, R*T, R]`` int16, ``counts[q, m, j]`` = how many of rollout ``j``'s tokens are among
    the ``m + 1`` smallest pooled values; ``lengths``: ``[Qc, R]``.
    """

    sorted: Tensor
    prefix: Tensor
    pooled: Tensor
    counts: Tensor
    lengths: Tensor

    @classmethod
    def build(cls, tok: Tensor, lengths: Tensor) -> "SortedTokens":
        qc, r, t = tok.shape
        if t > torch.iinfo(torch.int16).max:
            raise ValueError(f"rollouts of more than {torch.iinfo(torch.int16).max} tokens are not supported")
        valid = torch.arange(t)[None, None, :] < lengths[..., None]
        # sort in the tokens' own precision (same order), then widen: the sums below are float64
        srt32 = torch.where(valid, tok, torch.full_like(tok, math.inf)).sort(-1).values
        pooled32, order = srt32.reshape(qc, r * t).sort(-1)
        srt, pooled = srt32.double(), pooled32.double()
        prefix = torch.zeros(qc, r, t + 1, dtype=torch.float64)
        prefix[..., 1:] = (srt32.masked_fill(~valid, 0.0).double()).cumsum(-1)  # valid tokens sort first
        owner = (order // t).unsqueeze(-1)
        counts = torch.zeros(qc, r * t, r, dtype=torch.int16)
        pooled_valid = torch.arange(r * t)[None, :] < lengths.sum(-1, keepdim=True)
        counts.scatter_(2, owner, pooled_valid.to(torch.int16).unsqueeze(-1))
        counts = counts.cumsum(1, dtype=torch.int16)
        return cls(sorted=srt, prefix=prefix, pooled=pooled, counts=counts, lengths=lengths)


def _pooled_order_positions(tokens: SortedTokens, idx: Tensor, targets: Tensor, block: int = 64) -> Tensor:
    """Positions in ``tokens.pooled`` of the order statistics ``targets`` (1-based ranks) of each subset's
    tokens.

    The number of subset tokens among the ``m + 1`` smallest pooled values is
    ``count_s(m) = sum_{j in subset} counts[m, j]``, non-decreasing in ``m``; the answer is the smallest ``m``
    with ``count_s(m) >= target``. A batched matmul of subset membership with the count rows at every
    ``block``-th position brackets it, a binary search inside the block finishes it.
    idx: ``[Qc, S, N]`` subset members; targets: ``[Qc, S, K]`` ranks in ``1..n_s``. Returns ``[Qc, S, K]``
    positions (long).
    """
    qc, s, k = targets.shape
    n = idx.shape[-1]
    m_total, r = tokens.counts.shape[1], tokens.counts.shape[2]
    grid = torch.arange(block - 1, m_total + block - 1, block).clamp_max(m_total - 1)  # block ends
    member = torch.zeros(qc, s, r, dtype=torch.float32).scatter_(2, idx, 1.0)
    grid_counts = torch.bmm(member, tokens.counts[:, grid, :].float().transpose(1, 2))  # [Qc, S, G], exact ints
    first_block = (grid_counts.unsqueeze(2) < targets.unsqueeze(-1)).sum(-1)  # [Qc, S, K]
    lo = first_block * block
    hi = torch.minimum(lo + block - 1, torch.tensor(m_total - 1))
    flat_counts = tokens.counts.reshape(qc, m_total * r)
    members = idx[:, :, None, :]  # [Qc, S, 1, N]
    for _ in range(max(1, math.ceil(math.log2(block))) + 1):
        mid = (lo + hi) // 2
        flat = (mid.unsqueeze(-1) * r + members).reshape(qc, s * k * n)
        below = flat_counts.gather(1, flat).view(qc, s, k, n).sum(-1, dtype=torch.int32)
        ok = below >= targets
        hi = torch.where(ok, mid, hi)
        lo = torch.where(ok, lo, mid + 1)
    return lo


def _pooled_quantile(tokens: SortedTokens, idx: Tensor, n_tok: Tensor, p: float) -> Tensor:
    """``torch.quantile(pooled subset tokens, p)`` (linear) for every subset: ``[Qc, S]`` float64.

    With ``h = (n - 1) p``: ``x_(floor h) + (h - floor h) (x_(floor h + 1) - x_(floor h))`` (0-based order
    statistics). Only ``x_(floor h)`` is searched; the next order statistic is the smallest member token not
    yet counted at that position (each member's next sorted token).
    """
    qc, s, n = idx.shape
    t = tokens.sorted.shape[-1]
    r = tokens.counts.shape[2]
    h = (n_tok - 1).double() * p
    f = h.floor()
    pos = _pooled_order_positions(tokens, idx, (f.long() + 1).unsqueeze(-1))[..., 0]  # [Qc, S]
    x_f = tokens.pooled.gather(1, pos)
    used = tokens.counts.reshape(qc, -1).gather(1, (pos.unsqueeze(-1) * r + idx).reshape(qc, s * n))
    used = used.view(qc, s, n).long()  # tokens of each member among the first pos + 1 pooled values
    flat_sorted = tokens.sorted.reshape(qc, -1)
    nxt = flat_sorted.gather(1, (idx * t + used.clamp_max(t - 1)).reshape(qc, s * n)).view(qc, s, n)
    nxt = torch.where(used < t, nxt, torch.full_like(nxt, math.inf)).amin(-1)
    frac = h - f
    return torch.where(frac > 0, x_f + frac * (nxt - x_f), x_f)


def calibrated_confidence_means(tokens: SortedTokens, idx: Tensor, eps: float,
                                quantiles=CALIBRATION_QUANTILES) -> Tensor:
    """``C_i`` of every subset member: the token mean of VisConf's calibrated confidence (sec. 4.1),
    with the 5%/95% quantiles pooled over the subset's rollouts.

    tokens: the question chunk's :class:`SortedTokens` of self-certainty; idx ``[Qc, S, N]``.
    Returns ``[Qc, S, N]`` float64.
    """
    qc, r, _ = tokens.sorted.shape
    s = idx.shape[1]
    lengths = tokens.lengths
    n_tok = lengths.gather(1, idx.flatten(1)).view_as(idx).sum(-1)  # [Qc, S] pooled tokens per subset
    q_lo = _pooled_quantile(tokens, idx, n_tok, quantiles[0])
    q_hi = _pooled_quantile(tokens, idx, n_tok, quantiles[1])
    d = (q_hi - q_lo).clamp_min(eps)
    upper = q_lo + d
    a_q = q_lo[:, None, :].expand(qc, r, s).contiguous()  # [Qc, R, S]
    u_q = upper[:, None, :].expand(qc, r, s).contiguous()
    n_le_a = torch.searchsorted(tokens.sorted, a_q, right=True)  # tokens with k <= a contribute 0
    n_lt_u = torch.searchsorted(tokens.sorted, u_q, right=False)  # tokens with k >= a + d contribute 1
    between = tokens.prefix.gather(2, n_lt_u) - tokens.prefix.gather(2, n_le_a)
    lin = (between - a_q * (n_lt_u - n_le_a)) / d[:, None, :]
    c_all = (lin + (lengths[..., None] - n_lt_u)) / lengths[..., None]  # [Qc, R, S]
    return c_all.transpose(1, 2).gather(2, idx)

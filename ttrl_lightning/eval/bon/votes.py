"""Batched answer votes of the best-of-N protocol: VisConf's vote and tie rule over ``[..., N]`` classes.

The batched form of :func:`ttrl_lightning.consensus.voting.weighted_vote`:
``Vote(a) = sum_i 1[cls_i = a] w_i`` over every leading index at once; ties go to the answer whose
earliest supporting rollout has the lowest position (VisConf appendix A). Integer weights (counts, RWC
numerators) give exact ties.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ttrl_lightning.consensus.ranks import rank_numerators

__all__ = ["first_positions", "vote", "rwc_numerators"]


def first_positions(cls: Tensor, num_classes: int) -> Tensor:
    """``[..., C]`` position of each class's earliest supporting rollout (``N`` when absent)."""
    n = cls.shape[-1]
    pos = torch.arange(n).expand(cls.shape).contiguous()
    first = torch.full((*cls.shape[:-1], num_classes), n, dtype=torch.long)
    return first.scatter_reduce_(-1, cls, pos, reduce="amin")


def vote(cls: Tensor, weights: Tensor, num_classes: int, first: Tensor | None = None) -> Tensor:
    """Winner class ``[...]`` of ``Vote(a) = sum_i 1[cls_i = a] w_i`` with VisConf's tie rule.

    ``cls, weights: [..., N]``; integer weights give exact ties. Positions are in original-rollout order,
    so "earliest supporting rollout" = lowest position. ``first`` may pass cached :func:`first_positions`.
    """
    n = cls.shape[-1]
    if first is None:
        first = first_positions(cls, num_classes)
    votes = torch.zeros(first.shape, dtype=weights.dtype).scatter_add_(-1, cls, weights)
    present = first < n
    lowest = torch.finfo(votes.dtype).min if votes.is_floating_point() else torch.iinfo(votes.dtype).min
    masked = votes.masked_fill(~present, lowest)
    cand = present & (masked == masked.amax(-1, keepdim=True))
    return torch.where(cand, first, n + 1).argmin(-1)


def rwc_numerators(gt: Tensor, eq: Tensor) -> Tensor:
    """Exact integers ``2 (N - r_i)``; with ``N = 1`` the single rollout gets the only (non-zero) vote."""
    n = gt.shape[-1]
    if n == 1:
        return torch.ones_like(gt)
    return rank_numerators(gt, eq, n)

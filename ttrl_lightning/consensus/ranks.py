"""Within-question ranks and the weights built from them (VisConf sec. 5.1, appendix A and E.4)."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["average_ranks", "rank_numerators", "rank_weights", "borda_weights", "greater_equal_counts",
           "ranks_from_counts", "borda_from_counts"]


def _as_scores(scores) -> Tensor:
    s = torch.as_tensor(scores, dtype=torch.float64)
    if s.dim() != 1:
        raise ValueError(f"scores must be a 1-D tensor [N], got shape {tuple(s.shape)}")
    if s.numel() == 0:
        raise ValueError("scores is empty")
    if bool(torch.isnan(s).any()):
        raise ValueError("scores holds NaN")
    return s


def greater_equal_counts(s: Tensor) -> tuple[Tensor, Tensor]:
    """For each i: ``#{j: s_j > s_i}`` and ``#{j: s_j == s_i}`` (self included), along the last dim of
    ``[..., N]`` (batched: the best-of-N harness passes ``[Q, S, N]``)."""
    gt = (s.unsqueeze(-2) > s.unsqueeze(-1)).sum(-1)
    eq = (s.unsqueeze(-2) == s.unsqueeze(-1)).sum(-1)
    return gt, eq


def ranks_from_counts(gt: Tensor, eq: Tensor) -> Tensor:
    """Average descending ranks ``r_i = 1 + #gt + (#eq - 1) / 2`` (float64)."""
    return 1.0 + gt.double() + (eq.double() - 1.0) / 2.0


def borda_from_counts(gt: Tensor, eq: Tensor, p: float) -> Tensor:
    """``(N - r_i + 1)^p`` from :func:`greater_equal_counts` (``N`` = last dim)."""
    return (gt.shape[-1] - ranks_from_counts(gt, eq) + 1.0).pow(p)


def average_ranks(scores) -> Tensor:
    """Descending ranks, ``r = 1`` for the highest score, exact ties get their average rank.

    ``r_i = 1 + #{j: s_j > s_i} + (#{j: s_j = s_i} - 1) / 2``. ``-inf`` scores are allowed (ranked last).
    """
    return ranks_from_counts(*greater_equal_counts(_as_scores(scores)))


def rank_numerators(gt: Tensor, eq: Tensor, n: int) -> Tensor:
    """Integer numerators of RWC weights: ``2 (N - r_i) = 2N - 1 - 2 #gt - #eq``.

    Vote sums of these integers are exact, so the answer-level tie rule never depends on float rounding.
    """
    return 2 * n - 1 - 2 * gt - eq


def rank_weights(scores) -> Tensor:
    """Rank-Weighted Consensus weights ``w_i = (N - r_i) / (N - 1)`` (VisConf sec. 5.1).

    Top rollout gets 1, bottom gets 0; exact ties share their average rank; when all scores are equal
    (or ``N = 1``) every rollout gets 0.5 (VisConf appendix A). The weights sum to ``N / 2``.
    """
    s = _as_scores(scores)
    n = s.numel()
    if n == 1:
        return torch.full((1,), 0.5, dtype=torch.float64)
    gt, eq = greater_equal_counts(s)
    return rank_numerators(gt, eq, n).double() / (2.0 * (n - 1))


def borda_weights(scores, p: float) -> Tensor:
    """Self-Certainty's Borda weights ``b_p(r_i) = (N - r_i + 1)^p`` (Kang et al. 2025; VisConf sec. 5.1).

    With ``p = 1``: ``b_1 = (N - 1) w_i + 1`` (VisConf appendix E.4).
    """
    if p <= 0:
        raise ValueError(f"Borda exponent p must be > 0, got {p}")
    return borda_from_counts(*greater_equal_counts(_as_scores(scores)), p)

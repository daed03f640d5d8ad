"""Weighted answer votes with VisConf's tie rule (appendix A)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..errors import checked_list

__all__ = ["weighted_vote", "check_answers"]


def check_answers(answers: Sequence[str], n: int | None = None, name: str = "answers") -> list[str]:
    """Validate a list of answer labels (strings; ``extract_answer`` / ``NO_ANSWER`` give them); raise a clear
    error otherwise."""
    out = checked_list(answers, name, str, "str")
    if n is not None and len(out) != n:
        raise ValueError(f"{name} has {len(out)} entries but {n} scores/weights were given")
    return out


def weighted_vote(answers: Sequence[str], weights: Tensor) -> tuple[str, dict[str, float]]:
    """``Vote(a) = sum_i 1[a_i = a] w_i``; the answer with the largest vote wins (VisConf sec. 5.2).

    Tie rule (VisConf appendix A): among answers with equal votes, the one whose earliest supporting
    rollout has the lowest index wins. Ties are exact comparisons of the vote sums: pass integer-valued
    weights (counts, RWC numerators) when exact ties matter.

    Returns:
        (winner, support) with ``support`` ordered by each answer's earliest supporting rollout.
    """
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.dim() != 1 or w.numel() != len(answers):
        raise ValueError(f"weights must be [N={len(answers)}], got shape {tuple(w.shape)}")
    if bool(~torch.isfinite(w).all()):
        raise ValueError("vote weights must be finite")
    support: dict[str, float] = {}
    for a, wi in zip(answers, w.tolist()):
        support[a] = support.get(a, 0.0) + wi
    best = None
    for a, v in support.items():  # insertion order = earliest supporting rollout
        if best is None or v > support[best]:
            best = a
    return best, support

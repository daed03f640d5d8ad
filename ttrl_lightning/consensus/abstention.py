"""Abstention: vote margin and split-conformal prediction sets (Pixelis sec. 3.2.3, "Consensus and
abstention"; supp. S6, "Masks" and step 4 of its pseudo-code. Supp. S6 points to "Sec. 5.2" for the consensus
answer, a section the paper does not have: the vote is in sec. 3.2.3).

Pixelis abstains (mask ``m(q) = 0``) "if the uncertainty-weighted vote margin < delta or the conformal set
has |C| > 1" (supp. S6). Here:

* margin ``= (s_(1) - s_(2)) / sum_a s(a)``, the gap between the two largest answer supports normalised by
  the total vote mass (1.0 when one answer holds all the mass);
* the conformal set uses the nonconformity ``1 - s(a) / sum_a s(a)`` (split conformal, Angelopoulos &
  Bates 2021): on calibration questions with known gold, ``qhat`` is the
  ``ceil((n + 1)(1 - alpha)) / n`` empirical quantile of the gold answers' nonconformity, and the set of a
  new question is ``{a : 1 - s(a)/sum s <= qhat}``. An empty set also abstains (no answer is plausible at
  the requested coverage).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch

__all__ = ["vote_margin", "normalised_support", "conformal_threshold", "conformal_set"]


def normalised_support(support: Mapping[str, float]) -> dict[str, float]:
    """``s(a) / sum_a s(a)``; raises on negative or non-finite support or zero total mass."""
    vals = list(support.values())
    if not vals:
        raise ValueError("support is empty")
    if any((not math.isfinite(v)) or v < 0 for v in vals):
        raise ValueError("abstention needs finite, non-negative vote support")
    total = sum(vals)
    if total <= 0:
        raise ValueError("total vote mass is zero: nothing to normalise")
    return {a: v / total for a, v in support.items()}


def vote_margin(support: Mapping[str, float]) -> float:
    """Normalised margin between the two largest supports, in ``[0, 1]``."""
    p = sorted(normalised_support(support).values(), reverse=True)
    return p[0] - (p[1] if len(p) > 1 else 0.0)


def conformal_threshold(gold_support: Sequence[float], alpha: float = 0.1) -> float:
    """Split-conformal ``qhat`` from calibration questions.

    Args:
        gold_support: for each calibration question, the *normalised* support of its gold answer
            (0 when no rollout gave the gold answer).
        alpha: miscoverage level; the set of a new question contains its true answer with probability
            at least ``1 - alpha`` (exchangeability assumed).
    """
    s = torch.as_tensor(list(gold_support), dtype=torch.float64)
    if s.numel() == 0:
        raise ValueError("conformal_threshold needs at least one calibration question")
    if bool(~torch.isfinite(s).all()) or bool((s < 0).any()) or bool((s > 1 + 1e-9).any()):
        raise ValueError("gold_support must hold normalised supports in [0, 1]")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    scores = torch.sort(1.0 - s).values
    n = scores.numel()
    k = math.ceil((n + 1) * (1 - alpha))
    if k > n:  # too few calibration points for this alpha: the set must contain every answer
        return float("inf")
    return float(scores[k - 1])


def conformal_set(support: Mapping[str, float], qhat: float) -> list[str]:
    """Answers whose nonconformity ``1 - s(a)/sum s`` is at most ``qhat``, by decreasing support."""
    p = normalised_support(support)
    return [a for a, v in sorted(p.items(), key=lambda kv: -kv[1]) if 1.0 - v <= qhat]

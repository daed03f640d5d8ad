"""Per-rollout scores of the best-of-N protocol, and what each needs from the pool.

Computed once per rollout (they do not depend on the subset), over its ``n`` valid tokens:

* ``K`` = ``(1/n) sum_t self_certainty_t`` (Self-Certainty, Kang et al. 2025);
* ``V`` = ``(1/n) sum_t visual_engagement_t`` (VisConf sec. 3);
* ``L`` = ``sum_t a_t^lambda (logprob_t + alpha log a_t) / sum_t a_t^lambda`` with ``a_t`` the image
  attention mass (LookBack; ``-inf`` when no token attends to the image);
* ``len`` = ``n`` (the ``min_length`` baseline ranks by ``-n``).

``Z`` (VisConf's ``V C``, sec. 4.1) is listed here too but computed inside each subset, because its
calibration quantiles are pooled over the subset's rollouts (:mod:`.calibration`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["RolloutScore", "ROLLOUT_SCORES", "VISCONF_SCORE", "rollout_scores"]


@dataclass(frozen=True)
class RolloutScore:
    """What a score needs: the pool's per-token ``signals``, token counts for every rollout
    (``needs_token_counts``), and whether it is recomputed inside every subset (``per_subset``)."""

    key: str
    signals: tuple[str, ...] = ()
    needs_token_counts: bool = False
    per_subset: bool = False


#: the key of VisConf's subset-calibrated score ``Z``
VISCONF_SCORE = "Z"

ROLLOUT_SCORES: dict[str, RolloutScore] = {s.key: s for s in (
    RolloutScore("K", signals=("self_certainty",)),
    RolloutScore("V", signals=("visual_engagement",)),
    RolloutScore("L", signals=("logprob", "image_attention")),
    RolloutScore("len", needs_token_counts=True),
    RolloutScore(VISCONF_SCORE, signals=("visual_engagement", "self_certainty"), per_subset=True),
)}


def rollout_scores(pool, alpha: float, lam: float) -> dict[str, Tensor]:
    """``[Q, R]`` float64 per-rollout scores ``K``, ``V``, ``L`` and ``len`` of the original view (see the
    module table) -- each only when the pool has the signals it needs."""
    r0 = pool.num_rollouts_in_view(0)
    lengths = pool.lengths[:, :r0]
    out: dict[str, Tensor] = {"len": lengths.double()}
    if not pool.signals:
        return out
    if bool((lengths < 1).any()):
        raise ValueError("per-token signals need every original-view rollout to have >= 1 token")
    t = next(iter(pool.signals.values())).shape[-1]
    valid = torch.arange(t)[None, None, :] < lengths[..., None]
    n = lengths.double()

    def available(key: str) -> bool:
        return all(name in pool.signals for name in ROLLOUT_SCORES[key].signals)

    def mean(name: str) -> Tensor:
        return pool.signals[name][:, :r0].masked_fill(~valid, 0.0).sum(-1, dtype=torch.float64) / n

    if available("K"):
        out["K"] = mean("self_certainty")
    if available("V"):
        out["V"] = mean("visual_engagement")
    if available("L"):
        a = pool.signals["image_attention"][:, :r0].double()
        if bool((a < 0).any()) or bool((a > 1 + 1e-6).any()):
            raise ValueError("image_attention must be an attention mass in [0, 1]")
        lp = pool.signals["logprob"][:, :r0].double()
        w = a.pow(lam) * valid
        log_a = torch.where(a > 0, a.log(), torch.zeros_like(a))
        total = w.sum(-1)
        num = (w * (lp + alpha * log_a)).sum(-1)
        out["L"] = torch.where(total > 0, num / total.clamp_min(1e-300), torch.full_like(total, -math.inf))
    for k, v in out.items():
        if bool(torch.isnan(v).any()):
            raise ValueError(f"per-rollout score {k} has NaN; check the pool's per-token arrays")
    return out

"""Per-token rollout signals and rollout-level quality scores (plain PyTorch reference).

Token level (VisConf sec. 3.1; algebra in ANCHORS "Streaming token statistics"), for logits ``z: [T, V]``
of the positions that predicted the sampled tokens ``y: [T]``, with ``L = logsumexp(z)``:

* entropy          ``H_t = L - sum_j p_j z_j``
* self-certainty   ``k_t = KL(U || p_t) = L - mean_j(z_j) - log V``   (Kang et al. 2025)
* log-probability  ``l_t = z_{y_t} - L``

Rollout level, for one question's candidate set ``G``:

* :func:`calibrate_confidence` - VisConf sec. 4.1, candidate-relative calibration of ``k``.
* :func:`self_certainty_score` - ``K_i = mean_t k_{i,t}`` (VisConf eq. for ``K_i``).
* :func:`lookback_score`       - LookBack, VisConf appendix A:
  ``L_i = sum_t A^lam (l + alpha log A) / sum_t A^lam``.
* :func:`visconf_score`        - VisConf sec. 4.2 / appendix D: ``Z_i = V_i C_i`` or ``V_i^a C_i^(1-a)``.
* :func:`min_length_score`     - the MinLength ablation (VisConf sec. 7.2): shorter is better.

The fused, streaming versions of the token statistics live in :mod:`ttrl_lightning.ops`; this module is
the readable reference that everything else is checked against.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

__all__ = [
    "token_signals",
    "calibrate_confidence",
    "self_certainty_score",
    "lookback_score",
    "visconf_score",
    "min_length_score",
    "check_finite",
    "CALIBRATION_QUANTILES",
]

#: Lower and upper pooled quantiles of VisConf's calibration (sec. 4.1).
CALIBRATION_QUANTILES = (0.05, 0.95)


def check_finite(x: Tensor, name: str, allow_empty: bool = False) -> Tensor:
    """Raise ``ValueError`` naming ``name`` if ``x`` is empty (unless allowed) or holds NaN/inf."""
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    if x.numel() == 0 and not allow_empty:
        raise ValueError(f"{name} is empty")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} holds {bad} non-finite value(s) (NaN or inf)")
    return x


def token_signals(logits: Tensor, token_ids: Tensor) -> dict[str, Tensor]:
    """Per-token ``entropy``, ``self_certainty`` and ``logprob`` from full logits, in float32.

    Args:
        logits: ``[T, V]`` (or any ``[..., V]``, e.g. ``[R, C, V]`` for a rollout batch) unscaled logits of
            the positions that predicted each sampled token.
        token_ids: ``[T]`` (``[...]``) the sampled token ids.

    Returns:
        dict of ``[T]`` (``[...]``) float32 tensors: ``entropy`` (nats), ``self_certainty``
        (``KL(U||p)``, nats) and ``logprob`` (log-probability of the sampled token).
    """
    if logits.dim() < 2:
        raise ValueError(f"logits must be [T, V] (or [..., V]), got shape {tuple(logits.shape)}")
    if token_ids.shape != logits.shape[:-1]:
        raise ValueError(f"token_ids must have shape {tuple(logits.shape[:-1])}, got {tuple(token_ids.shape)}")
    check_finite(logits, "logits")
    vocab = logits.shape[-1]
    if token_ids.numel() and (int(token_ids.min()) < 0 or int(token_ids.max()) >= vocab):
        raise ValueError(f"token_ids must lie in [0, {vocab}), got range "
                         f"[{int(token_ids.min())}, {int(token_ids.max())}]")
    z = logits.float()
    lse = torch.logsumexp(z, dim=-1)
    p = torch.softmax(z, dim=-1)
    entropy = lse - (p * z).sum(-1)
    self_certainty = lse - z.mean(-1) - math.log(vocab)
    logprob = z.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1) - lse
    return {"entropy": entropy, "self_certainty": self_certainty, "logprob": logprob}


def calibrate_confidence(token_values: Sequence[Tensor], eps: float = 1e-6,
                         quantiles: tuple[float, float] = CALIBRATION_QUANTILES) -> list[Tensor]:
    """Candidate-relative calibration of token confidence (VisConf sec. 4.1).

    ``c_{i,t} = clip_[0,1]((k_{i,t} - Q_.05(G)) / max(Q_.95(G) - Q_.05(G), eps))``, where the quantiles are
    taken over the token values of *all* candidates of one question pooled together (linear interpolation,
    as ``torch.quantile``).

    Args:
        token_values: one ``[T_i]`` tensor of token self-certainty per candidate rollout.
        eps: the denominator guard ``epsilon > 0``.

    Returns:
        one ``[T_i]`` float tensor in ``[0, 1]`` per candidate.
    """
    if len(token_values) == 0:
        raise ValueError("calibrate_confidence needs at least one candidate")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    vals = [check_finite(torch.as_tensor(v, dtype=torch.float64), f"token_values[{i}]")
            for i, v in enumerate(token_values)]
    pooled = torch.cat([v.reshape(-1) for v in vals])
    lo = torch.quantile(pooled, quantiles[0])
    hi = torch.quantile(pooled, quantiles[1])
    scale = torch.clamp(hi - lo, min=eps)
    return [((v - lo) / scale).clamp(0.0, 1.0) for v in vals]


def self_certainty_score(self_certainty: Tensor) -> Tensor:
    """``K_i = (1/T_i) sum_t k_{i,t}``: mean token self-certainty of one rollout (VisConf sec. 3.1)."""
    k = check_finite(torch.as_tensor(self_certainty, dtype=torch.float64), "self_certainty")
    return k.mean()


def lookback_score(logprob: Tensor, image_attention: Tensor, alpha: float = 0.5, lam: float = 1.25) -> Tensor:
    """LookBack response score (Cho et al. 2026, as used in VisConf appendix A).

    ``L_i = sum_t A_t^lam (l_t + alpha log A_t) / sum_t A_t^lam`` with ``l_t`` the sampled-token
    log-probability and ``A_t`` the all-layer, all-head image-attention mass. VisConf's defaults:
    ``alpha = 0.5, lam = 1.25``. Tokens with ``A_t = 0`` carry zero weight (``0 log 0 = 0``); a rollout
    whose image attention is zero everywhere has no LookBack evidence and scores ``-inf`` (ranked last).
    """
    lp = check_finite(torch.as_tensor(logprob, dtype=torch.float64), "logprob")
    a = check_finite(torch.as_tensor(image_attention, dtype=torch.float64), "image_attention")
    if lp.shape != a.shape:
        raise ValueError(f"logprob {tuple(lp.shape)} and image_attention {tuple(a.shape)} differ in shape")
    if bool((a < 0).any()) or bool((a > 1 + 1e-6).any()):
        raise ValueError("image_attention must be an attention mass in [0, 1]")
    if lam <= 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    w = a.pow(lam)
    total = w.sum()
    if float(total) == 0.0:
        return torch.tensor(float("-inf"), dtype=torch.float64)
    log_a = torch.where(a > 0, a.log(), torch.zeros_like(a))
    return (w * (lp + alpha * log_a)).sum() / total


def visconf_score(visual_engagement: Tensor, calibrated_confidence: Tensor, alpha: float | None = None) -> Tensor:
    """VisConf quality ``Z_i = V_i C_i`` (sec. 4.2), or ``V_i^alpha C_i^(1-alpha)`` (appendix D).

    ``V_i`` and ``C_i`` are the token means of visual engagement ``v_{i,t}`` and calibrated confidence
    ``c_{i,t}`` over the whole rollout (trajectory-level fusion, not token-level). ``alpha = 0.5`` ranks
    exactly as the product.
    """
    v = check_finite(torch.as_tensor(visual_engagement, dtype=torch.float64), "visual_engagement")
    c = check_finite(torch.as_tensor(calibrated_confidence, dtype=torch.float64), "calibrated_confidence")
    big_v, big_c = v.mean(), c.mean()
    if alpha is None:
        return big_v * big_c
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    return big_v.pow(alpha) * big_c.pow(1.0 - alpha)


def min_length_score(length: int | Tensor) -> Tensor:
    """MinLength baseline: score ``-T_i``, so the shortest rollout ranks first (VisConf sec. 7.2)."""
    n = int(length)
    if n < 0:
        raise ValueError(f"length must be >= 0, got {n}")
    return torch.tensor(-float(n), dtype=torch.float64)

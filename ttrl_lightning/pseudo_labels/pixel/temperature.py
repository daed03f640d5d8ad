"""Temperature scaling of Pixel TTRL's confidences (``Cal_j``; Guo et al. 2017) and its fit on a labelled
dev-cal split (Pixelis appendix 9)."""
from __future__ import annotations

import logging
import math
from typing import Sequence

import torch

from ttrl_lightning.pseudo_labels.pseudo_label import PseudoLabelError

__all__ = ["temperature_scale", "fit_temperature", "CONFIDENCE_CLAMP", "TEMPERATURE_BOUNDS"]

log = logging.getLogger(__name__)

#: ``p_j`` is clamped into ``[CONFIDENCE_CLAMP, 1 - CONFIDENCE_CLAMP]`` before the logit.
CONFIDENCE_CLAMP = 1e-6
#: :func:`fit_temperature` searches ``T`` in this interval.
TEMPERATURE_BOUNDS = (1e-2, 1e2)


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature <= 0:
        raise PseudoLabelError(f"pixel: temperature must be a finite number > 0, got {temperature!r}")
    return float(temperature)


def _logits(confidences) -> torch.Tensor:
    p = torch.as_tensor(confidences, dtype=torch.float64).clamp(CONFIDENCE_CLAMP, 1.0 - CONFIDENCE_CLAMP)
    return torch.log(p) - torch.log1p(-p)


def temperature_scale(confidences, temperature: float = 1.0) -> torch.Tensor:
    """Temperature scaling (Guo et al. 2017) of confidences ``p``: ``sigmoid(logit(p) / T)``, ``p`` clamped
    into ``[1e-6, 1 - 1e-6]``. ``T > 1`` softens overconfident scores, ``T = 1`` leaves them (clamped)."""
    return torch.sigmoid(_logits(confidences) / _check_temperature(temperature))


def fit_temperature(confidences: Sequence[float], correct: Sequence[bool]) -> float:
    """Fit ``T`` by minimising the binary NLL of ``sigmoid(logit(p_i) / T)`` against ``correct_i`` on a
    labelled dev-cal split (Pixelis appendix 9: "TS T ~ 1.2 on the dev-cal split").

    ``NLL(s) = sum_i softplus(-z_i s) [correct_i] + softplus(z_i s) [not correct_i]`` with ``z = logit(p)``
    and ``s = 1/T`` is convex in ``s`` (a one-coefficient logistic regression), so the minimiser is the root
    of the increasing ``dNLL/ds = sum_i z_i (sigmoid(z_i s) - correct_i)``, found by bisection in ``log s``
    over ``T`` in :data:`TEMPERATURE_BOUNDS`. When the root lies outside, the nearest bound is returned and a
    warning logged (e.g. every confident rollout correct pushes ``T`` towards 0). Every ``p = 0.5`` (no
    information) gives 1.0.

    Args:
        confidences: ``[M]`` confidences ``p_i`` in ``[0, 1]`` (for rollouts, ``exp`` of the mean decisive
            log-probability).
        correct: ``[M]`` bools (0/1), whether the rollout's answer is the gold answer.
    """
    if isinstance(confidences, (str, bytes)) or isinstance(correct, (str, bytes)):
        raise TypeError("confidences and correct must be sequences of numbers / bools")
    try:
        p = torch.as_tensor(list(confidences), dtype=torch.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError("confidences must be a list of numbers") from None
    y_list = list(correct)
    for i, c in enumerate(y_list):
        if not (isinstance(c, bool) or (isinstance(c, (int, float)) and c in (0, 1))):
            raise ValueError(f"correct[{i}] must be a bool (or 0/1), got {c!r}")
    if p.numel() == 0:
        raise ValueError("fit_temperature needs at least one (confidence, correct) pair")
    if p.numel() != len(y_list):
        raise ValueError(f"{p.numel()} confidences but {len(y_list)} correctness labels")
    bad = ~(torch.isfinite(p) & (p >= 0) & (p <= 1))
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise ValueError(f"confidences[{i}] = {float(p[i])} is not a probability in [0, 1]")
    y = torch.tensor([float(c) for c in y_list], dtype=torch.float64)
    z = _logits(p)
    if bool((z == 0).all()):
        return 1.0

    def grad(log_s: float) -> float:
        return float((z * (torch.sigmoid(z * math.exp(log_s)) - y)).sum())

    t_lo, t_hi = TEMPERATURE_BOUNDS
    lo, hi = -math.log(t_hi), -math.log(t_lo)  # log s = -log T
    if grad(lo) >= 0:
        log.warning("fit_temperature: the NLL minimum lies at T >= %g; returning the bound", t_hi)
        return t_hi
    if grad(hi) <= 0:
        log.warning("fit_temperature: the NLL minimum lies at T <= %g; returning the bound", t_lo)
        return t_lo
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if grad(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return math.exp(-0.5 * (lo + hi))

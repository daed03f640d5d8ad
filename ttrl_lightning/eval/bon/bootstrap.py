"""Paired question-cluster bootstrap of accuracy differences (VisConf appendix B, Table 5).

For a target method ``t`` and comparator ``c`` with per-question accuracies ``a_t[q], a_c[q]`` (already
averaged over the question's subsets), the statistic is the mean paired difference
``D = mean_q (a_t[q] - a_c[q])``. Each replicate resamples the questions with replacement (the same draw
for both methods: paired) and recomputes ``D``; the interval is the percentile interval of the
replicates (2,000 by default, 95%).
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["paired_bootstrap"]


def paired_bootstrap(target: Tensor, comparator: Tensor, replicates: int = 2000, level: float = 0.95,
                     seed: int = 0) -> dict[str, float]:
    """Mean paired difference ``target - comparator`` and its percentile bootstrap interval.

    Args:
        target, comparator: ``[Q]`` per-question accuracies of the two methods on the same questions.
    Returns:
        ``{"diff", "lo", "hi"}`` in accuracy units (fractions).
    """
    a = torch.as_tensor(target, dtype=torch.float64)
    b = torch.as_tensor(comparator, dtype=torch.float64)
    if a.shape != b.shape or a.dim() != 1:
        raise ValueError(f"paired_bootstrap needs two [Q] tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.numel() == 0:
        raise ValueError("paired_bootstrap needs at least one question")
    if not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("per-question accuracies must be finite")
    if replicates < 1 or not 0 < level < 1:
        raise ValueError("replicates must be >= 1 and level in (0, 1)")
    d = a - b
    gen = torch.Generator().manual_seed(seed)
    means = torch.empty(replicates, dtype=torch.float64)
    block = max(1, 2_000_000 // d.numel())
    for start in range(0, replicates, block):
        stop = min(replicates, start + block)
        idx = torch.randint(0, d.numel(), (stop - start, d.numel()), generator=gen)
        means[start:stop] = d[idx].mean(-1)
    alpha = (1.0 - level) / 2.0
    lo, hi = torch.quantile(means, torch.tensor([alpha, 1.0 - alpha], dtype=torch.float64)).tolist()
    return {"diff": float(d.mean()), "lo": lo, "hi": hi}

"""Fixed subsets of the best-of-N protocol (VisConf sec. 6, appendix B).

For a budget ``N`` below the pool size ``R``, ``S`` subsets of ``N`` rollouts are drawn without replacement
per question, seeded, and shared by every method; ``N = R`` uses the full pool once. Each budget has its own
generator, ``derive_seed(seed, "bon_subsets", step=N)`` (:mod:`ttrl_lightning.seeding`), so the subsets do
not depend on the chunking, the method list or the other budgets. The views are drawn in order from it.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ttrl_lightning.seeding import derived_generator

__all__ = ["draw_subsets", "fixed_subsets"]


def draw_subsets(num_questions: int, pool_size: int, n: int, subsets: int, gen: torch.Generator) -> Tensor:
    """``[Q, S, N]`` sorted rollout indices: ``S`` subsets without replacement per question; the full
    pool once (``S = 1``) when ``N == pool_size``."""
    if n > pool_size:
        raise ValueError(f"N={n} exceeds the pool size {pool_size}")
    if n < 1:
        raise ValueError(f"N must be >= 1, got {n}")
    if n == pool_size:
        return torch.arange(pool_size).expand(num_questions, 1, pool_size).clone()
    keys = torch.rand(num_questions, subsets, pool_size, generator=gen)
    return keys.argsort(-1)[..., :n].sort(-1).values


def fixed_subsets(num_questions: int, view_sizes: Sequence[int], n: int, subsets: int,
                  seed: int) -> list[Tensor]:
    """The protocol's subsets of budget ``n``: one ``[Q, S, N]`` tensor per view (pool sizes ``view_sizes``,
    original view first), all drawn from the generator of ``derive_seed(seed, "bon_subsets", step=n)``."""
    gen = derived_generator(seed, "bon_subsets", step=n)
    return [draw_subsets(num_questions, size, n, subsets, gen) for size in view_sizes]

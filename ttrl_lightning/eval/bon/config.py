"""Settings of the best-of-N protocol (VisConf sec. 6 and appendix B): budgets, subsets and method knobs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["BoNConfig"]


@dataclass
class BoNConfig:
    """``ns``: budgets ``N``; ``subsets``: fixed subsets per question for ``N`` below the pool size; ``seed``:
    of the subsets (:func:`~.subsets.fixed_subsets`); ``borda_p``: the exponents of ``self_certainty_borda``
    (one report entry each); ``lookback_alpha`` / ``lookback_lambda``: LookBack's ``alpha`` and ``lambda``;
    ``visconf_alpha``: ``None`` for ``Z = V C``, else ``Z = V^a C^(1-a)``; ``calibration_eps``: the floor of
    the calibration's quantile spread; ``chunk_questions``: questions evaluated at once (memory, not results).
    """

    ns: Sequence[int] = (8, 16, 32)
    subsets: int = 100
    seed: int = 0
    borda_p: Sequence[float] = (0.3, 0.7, 1.2, 2.0)
    lookback_alpha: float = 0.5
    lookback_lambda: float = 1.25
    visconf_alpha: float | None = None
    calibration_eps: float = 1e-6
    chunk_questions: int = 32

"""A study's statistics: paired differences over questions and seeds, with hierarchical bootstrap intervals,
Holm-adjusted p-values across the label-free arms and the share of the gold gain an arm recovers.

The data of one comparison (arm ``A`` against a reference ``B``: the start checkpoint, or a control) is a
``[Q, S]`` array of paired differences ``d[q, s] = a[q, s] - b[q, s]``: ``a[q, s]`` is A's accuracy on question
``q`` in replicate ``s`` (correct samples / samples: one run seed, or one start seed x run seed pair), ``b[q, s]``
B's on the same question in the replicate paired with it (the start evaluated with that run seed's evaluation
seed; a control's run of the same seed). The estimate is ``mean(d)``.

**Interval** (two-stage, "hierarchical" bootstrap; Agarwal et al. 2021, "Deep RL at the edge of the statistical
precipice", report bootstrap intervals over runs and tasks rather than best-of-seeds): each of ``B`` replicates
draws ``Q`` questions with replacement, then ``S`` replicates (seeds) with replacement, and takes the mean of
``d`` over the drawn grid. The interval is the percentile interval of the replicates at level ``1 - alpha``;
the bootstrap generator has a fixed seed, so a report prints the same interval every time.

**p-value** (two-sided, null-shifted bootstrap): the replicates, shifted to mean 0, imitate the estimate's
distribution under "no difference"; ``p = (1 + #{|d*_b - mean(d*)| >= |mean(d)|}) / (1 + B)``.

**Across arms** (Holm 1979, ``statsmodels.stats.multitest.multipletests(method="holm")``): the label-free arms'
p-values against one reference are one family; an arm **improves** when its Holm-adjusted p is below ``alpha``
and its adjusted interval (Bonferroni level ``1 - alpha / m`` for ``m`` arms: a simultaneous interval, so it
never claims more than Holm) lies above 0.

**Gold share** (TraPO and RLAVR's "share of the gold gain recovered"): ``(A - start) / (gold - start)``, its
interval from the same bootstrap draws for numerator and denominator; it is undefined (None) when the gold gain's
own interval reaches 0 or below.

With 3 seeds the seed stage has 3 units to draw from: seed-to-seed variance is estimated poorly by any method;
the interval is then driven by the questions. ``tests/study/test_stats.py`` checks calibration (a null effect is
found about ``alpha`` of the time over synthetic draws) and power (a known effect is found).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Comparison", "compare", "bootstrap_means", "holm", "gold_share", "paired_grid", "DEFAULT_BOOTSTRAP"]

#: bootstrap replicates of a report (the interval's and the p-value's resolution)
DEFAULT_BOOTSTRAP = 10_000


@dataclass(frozen=True)
class Comparison:
    """One arm against one reference: the mean paired difference (accuracy, a fraction), its ``1 - alpha``
    interval, the two-sided p, the Holm-adjusted p and adjusted interval (None until :func:`holm` fills them),
    and how many questions and paired replicates it rests on."""

    mean: float
    low: float
    high: float
    p: float
    questions: int
    replicates: int
    alpha: float = 0.05
    p_adjusted: float | None = None
    adjusted_low: float | None = None
    adjusted_high: float | None = None

    @property
    def improves(self) -> bool | None:
        """The Holm-adjusted p below alpha and the adjusted interval above 0 (None before adjustment)."""
        if self.p_adjusted is None or self.adjusted_low is None:
            return None
        return self.p_adjusted < self.alpha and self.adjusted_low > 0

    def as_dict(self) -> dict:
        return {**asdict(self), "improves": self.improves}


def _grid(d) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2 or d.shape[0] < 2 or d.shape[1] < 1:
        raise ValueError(f"paired differences must be a [questions >= 2, replicates >= 1] array, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("paired differences hold a NaN or an infinity")
    return d


def bootstrap_means(d, n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0, *, draws=None) -> np.ndarray:
    """``n_boot`` two-stage bootstrap replicates of ``mean(d)`` for a ``[Q, S]`` array: questions drawn with
    replacement, then replicates. ``draws``: the ``(question_idx [B, Q], replicate_idx [B, S])`` to use (the
    same draws for several arrays: the gold share's numerator and denominator)."""
    d = _grid(d)
    q_idx, s_idx = draws if draws is not None else _draws(d.shape, n_boot, seed)
    per_replicate = d[q_idx].mean(axis=1)  # [B, S]: the drawn questions' mean in every replicate
    return np.take_along_axis(per_replicate, s_idx, axis=1).mean(axis=1)


def _draws(shape: tuple[int, int], n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if n_boot < 100:
        raise ValueError(f"n_boot must be at least 100, got {n_boot}")
    rng = np.random.default_rng(seed)
    q, s = shape
    return rng.integers(0, q, size=(n_boot, q)), rng.integers(0, s, size=(n_boot, s))


def compare(d, alpha: float = 0.05, n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> Comparison:
    """The :class:`Comparison` of paired differences ``d`` (``[Q, S]``; see the module docstring)."""
    d = _grid(d)
    boot = bootstrap_means(d, n_boot, seed)
    mean = float(d.mean())
    low, high = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    centred = boot - boot.mean()
    p = (1 + int(np.sum(np.abs(centred) >= abs(mean) - 1e-12))) / (1 + len(boot))
    return Comparison(mean, float(low), float(high), float(min(1.0, p)), d.shape[0], d.shape[1], alpha)


def holm(comparisons: Mapping[str, Comparison], grids: Mapping[str, np.ndarray], alpha: float = 0.05,
         n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict[str, Comparison]:
    """``comparisons`` (one family: every label-free arm against one reference) with the Holm-adjusted p
    (statsmodels) and the Bonferroni-level adjusted interval from each arm's paired differences ``grids``."""
    from dataclasses import replace

    from statsmodels.stats.multitest import multipletests

    names = list(comparisons)
    if not names:
        return {}
    m = len(names)
    _, adjusted, _, _ = multipletests([comparisons[n].p for n in names], alpha=alpha, method="holm")
    out = {}
    for name, p_adj in zip(names, adjusted):
        boot = bootstrap_means(grids[name], n_boot, seed)
        low, high = np.quantile(boot, [alpha / (2 * m), 1 - alpha / (2 * m)])
        out[name] = replace(comparisons[name], p_adjusted=float(p_adj), adjusted_low=float(low),
                            adjusted_high=float(high))
    return out


def gold_share(arm_gain, gold_gain, alpha: float = 0.05, n_boot: int = DEFAULT_BOOTSTRAP,
               seed: int = 0) -> dict | None:
    """``mean(arm_gain) / mean(gold_gain)`` (both ``[Q, S]`` paired differences from the start, on the same
    questions and replicates) and its percentile interval under shared bootstrap draws; None when the gold
    gain's own ``1 - alpha`` interval does not lie above 0 (the share is then undefined)."""
    a, g = _grid(arm_gain), _grid(gold_gain)
    if a.shape != g.shape:
        raise ValueError(f"the arm's and gold's gains must be paired on one grid, got {a.shape} and {g.shape}")
    draws = _draws(a.shape, n_boot, seed)
    boot_a, boot_g = bootstrap_means(a, draws=draws), bootstrap_means(g, draws=draws)
    if np.quantile(boot_g, alpha / 2) <= 0:
        return None
    ratio = boot_a / boot_g
    low, high = np.quantile(ratio, [alpha / 2, 1 - alpha / 2])
    return {"share": float(a.mean() / g.mean()), "low": float(low), "high": float(high)}


def paired_grid(arm: Mapping[str, Sequence[float]], reference: Mapping[str, Sequence[float]]
                ) -> tuple[np.ndarray, list[str]]:
    """The ``[Q, S]`` differences of two ``{replicate: per-question accuracies}`` mappings over the replicates
    both hold (in ``arm``'s order), and those replicates' names. Raises ``ValueError`` when none is shared or
    the question counts differ."""
    shared = [r for r in arm if r in reference]
    if not shared:
        raise ValueError(f"no replicate in common: {sorted(arm)} vs {sorted(reference)}")
    cols = []
    for r in shared:
        a, b = np.asarray(arm[r], dtype=np.float64), np.asarray(reference[r], dtype=np.float64)
        if a.shape != b.shape:
            raise ValueError(f"replicate {r}: {a.shape[0]} questions vs {b.shape[0]}")
        cols.append(a - b)
    return np.stack(cols, axis=1), shared

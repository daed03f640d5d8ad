"""The best-of-N protocol question by question through the public API (the oracle of :mod:`.bon`).

Straightforward on purpose: for every question and subset it gathers the rollouts' answer labels and
per-token signals, scores them with :mod:`ttrl_lightning.signals` and decides with
:func:`ttrl_lightning.consensus.aggregate` / :func:`harmonic_mean_select` / :func:`dual_view_majority`.
Which rule and score a method uses comes from its :class:`~.methods.BoNMethod` entry (``rule``, ``score``,
``needs_views``); everything else here is independent of the vectorised code.
It is slow; tests run it on small pools and ``benchmarks/labelers/bon_harness.py`` times it as the baseline.
"""
from __future__ import annotations

from typing import Callable

import torch

from ttrl_lightning.consensus import aggregate, dual_view_majority, harmonic_mean_select
from ttrl_lightning.signals import (calibrate_confidence, lookback_score, min_length_score, self_certainty_score,
                       visconf_score)
from ttrl_lightning.eval.bon.config import BoNConfig
from ttrl_lightning.eval.bon.methods import expand_methods

__all__ = ["evaluate_question"]


def _labels(pool, q: int, view: int, idx) -> list[str]:
    names = pool.class_names[q]
    return [names[int(pool.answer_class[q, view, j])] for j in idx]


def _correct(pool, q: int, label: str | None) -> float:
    if label is None:
        return 0.0
    return float(pool.class_correct[q, pool.class_names[q].index(label)])


def _tokens(pool, name: str, q: int, j: int) -> torch.Tensor:
    return pool.signals[name][q, j, : int(pool.lengths[q, j])].double()


def _self_certainty(pool, q: int, idx: list[int], cfg: BoNConfig) -> list[float]:
    return [float(self_certainty_score(_tokens(pool, "self_certainty", q, j))) for j in idx]


def _lookback(pool, q: int, idx: list[int], cfg: BoNConfig) -> list[float]:
    return [float(lookback_score(_tokens(pool, "logprob", q, j), _tokens(pool, "image_attention", q, j),
                                 cfg.lookback_alpha, cfg.lookback_lambda)) for j in idx]


def _visconf(pool, q: int, idx: list[int], cfg: BoNConfig) -> list[float]:
    cal = calibrate_confidence([_tokens(pool, "self_certainty", q, j) for j in idx], eps=cfg.calibration_eps)
    return [float(visconf_score(_tokens(pool, "visual_engagement", q, j), c, cfg.visconf_alpha))
            for j, c in zip(idx, cal)]


def _min_length(pool, q: int, idx: list[int], cfg: BoNConfig) -> list[float]:
    return [float(min_length_score(int(pool.lengths[q, j]))) for j in idx]


#: score key -> the subset members' scores through :mod:`ttrl_lightning.signals` (``len``: ``-n``)
_SUBSET_SCORES: dict[str, Callable[..., list[float]]] = {
    "K": _self_certainty, "L": _lookback, "Z": _visconf, "len": _min_length,
}
#: two-view rule -> the public decision
_TWO_VIEW = {"hms": harmonic_mean_select, "dual_view_majority": dual_view_majority}
#: rules that select nothing: statistics of the members' correctness
_POOL_STATISTICS = {"first": lambda c: sum(c) / len(c), "oracle": max}


def evaluate_question(pool, q: int, idx: list[int], idx1: list[int] | None, methods, cfg: BoNConfig) -> dict:
    """Correctness (0/1, or the expected value for ``first``) of every method on one subset of question ``q``.

    ``idx`` / ``idx1``: rollout indices of the original / reframed view in this subset.
    """
    labels = _labels(pool, q, 0, idx)
    cache: dict[str, list[float]] = {}

    def scores(kind: str) -> list[float]:
        if kind not in cache:
            cache[kind] = _SUBSET_SCORES[kind](pool, q, idx, cfg)
        return cache[kind]

    out = {}
    for rep, method, params in expand_methods(methods, cfg):
        if method.rule in _POOL_STATISTICS:
            out[rep] = _POOL_STATISTICS[method.rule]([_correct(pool, q, a) for a in labels])
        elif method.needs_views:
            out[rep] = _correct(pool, q, _TWO_VIEW[method.rule](labels, _labels(pool, q, 1, idx1)).answer)
        else:
            weights = scores(method.score) if method.score else None
            out[rep] = _correct(pool, q, aggregate(labels, method.rule, weights, **params).answer)
    return out

"""The best-of-N protocol question by question through the public API (the oracle of :mod:`.bon`).

Straightforward on purpose: for every question and subset it gathers the rollouts' answer labels and
per-token signals, scores them with :mod:`ttrl_lightning.signals` and decides with
:func:`ttrl_lightning.consensus.aggregate` / :func:`harmonic_mean_select` / :func:`dual_view_majority`.
It is slow; tests run it on small pools and ``benchmarks/bon_harness.py`` times it as the baseline.
"""
from __future__ import annotations

import torch

from ..answers import NO_ANSWER
from ..consensus import aggregate, dual_view_majority, harmonic_mean_select
from ..signals import calibrate_confidence, lookback_score, min_length_score, self_certainty_score, visconf_score
from .bon import BoNConfig, expand_methods

__all__ = ["evaluate_question"]

#: best-of-N method -> (consensus rule, per-rollout score it ranks by)
_SINGLE_VIEW = {
    "majority": ("majority", None),
    "self_certainty": ("top1", "K"),
    "self_certainty_borda": ("borda", "K"),
    "lookback": ("top1", "L"),
    "lookback_rwc": ("rwc", "L"),
    "visconf": ("top1", "Z"),
    "visconf_rwc": ("rwc", "Z"),
    "visconf_wc": ("wc", "Z"),
    "min_length": ("top1", "len"),
}
_TWO_VIEW = {"hms": harmonic_mean_select, "dual_view_majority": dual_view_majority}


def _labels(pool, q: int, view: int, idx) -> list[str]:
    names = pool.class_names[q]
    return [names[int(pool.answer_class[q, view, j])] for j in idx]


def _correct(pool, q: int, label: str | None) -> float:
    if label is None:
        return 0.0
    return float(pool.class_correct[q, pool.class_names[q].index(label)])


def _tokens(pool, name: str, q: int, j: int) -> torch.Tensor:
    return pool.signals[name][q, j, : int(pool.lengths[q, j])].double()


def evaluate_question(pool, q: int, idx: list[int], idx1: list[int] | None, methods, cfg: BoNConfig) -> dict:
    """Correctness (0/1, or the expected value for ``first``) of every method on one subset of question ``q``.

    ``idx`` / ``idx1``: rollout indices of the original / reframed view in this subset.
    """
    labels = _labels(pool, q, 0, idx)
    cache: dict[str, list[float]] = {}

    def scores(kind: str) -> list[float]:
        if kind not in cache:
            if kind == "K":
                cache[kind] = [float(self_certainty_score(_tokens(pool, "self_certainty", q, j))) for j in idx]
            elif kind == "L":
                cache[kind] = [float(lookback_score(_tokens(pool, "logprob", q, j), _tokens(pool, "image_attention", q, j),
                                                    cfg.lookback_alpha, cfg.lookback_lambda)) for j in idx]
            elif kind == "Z":
                cal = calibrate_confidence([_tokens(pool, "self_certainty", q, j) for j in idx], eps=cfg.calibration_eps)
                cache[kind] = [float(visconf_score(_tokens(pool, "visual_engagement", q, j), c, cfg.visconf_alpha))
                               for j, c in zip(idx, cal)]
            elif kind == "len":
                cache[kind] = [float(min_length_score(int(pool.lengths[q, j]))) for j in idx]
        return cache[kind]

    out = {}
    for rep, reg, params in expand_methods(methods, cfg.borda_p):
        if reg == "first":
            out[rep] = sum(_correct(pool, q, a) for a in labels) / len(labels)
        elif reg == "oracle":
            out[rep] = max(_correct(pool, q, a) for a in labels)
        elif reg in _TWO_VIEW:
            out[rep] = _correct(pool, q, _TWO_VIEW[reg](labels, _labels(pool, q, 1, idx1)).answer)
        else:
            rule, kind = _SINGLE_VIEW[reg]
            out[rep] = _correct(pool, q, aggregate(labels, rule, scores(kind) if kind else None, **params).answer)
    return out

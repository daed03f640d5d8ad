"""Answer aggregation rules, one registry by name (``CONSENSUS``), and :func:`aggregate`.

Each rule maps the answers of one question's ``N`` rollouts (and optional per-rollout scores) to a chosen
answer and per-answer support:

==============  =====================================================  ================================
name            vote / selection                                       source
==============  =====================================================  ================================
``majority``    ``Vote(a) = #{i: a_i = a}``                            Self-Consistency (Wang et al.)
``top1``        answer of ``argmax_i Q_i`` (ties: lowest index)        VisConf sec. 3.1, appendix A
``rwc``         ``Vote(a) = sum_i 1[a_i=a] (N - r_i)/(N - 1)``         VisConf sec. 5 (RWC)
``wc``          ``Vote(a) = sum_i 1[a_i=a] Q_i`` (raw scores)          VisConf sec. 7.2 (ablation)
``borda``       ``Vote(a) = sum_i 1[a_i=a] (N - r_i + 1)^p``           Self-Certainty (Kang et al.)
``weighted``    ``Vote(a) = sum_i 1[a_i=a] w_i`` (given weights)       Pixelis sec. 3.2.3 / supp. S6
==============  =====================================================  ================================

Answer ties go to the answer whose earliest supporting rollout has the lowest index (VisConf appendix A).
Labels are compared as strings: canonicalise them first (``answers.canonical_answer_classes``).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from ..registry import Registry
from .abstention import conformal_set, vote_margin
from .decision import Decision
from .ranks import _as_scores, borda_weights, greater_equal_counts, rank_numerators
from .voting import check_answers, weighted_vote

__all__ = ["CONSENSUS", "aggregate", "pixelis_weights"]

#: ``name -> rule(answers, scores, **params) -> (answer, support, chosen_index_or_None)``
CONSENSUS: Registry[Callable] = Registry("consensus rule")


def _require_scores(scores, n: int, method: str) -> torch.Tensor:
    if scores is None:
        raise ValueError(f"consensus rule {method!r} needs per-rollout scores")
    s = _as_scores(scores)
    if s.numel() != n:
        raise ValueError(f"{method}: {n} answers but {s.numel()} scores")
    return s


def _non_negative_weights(scores, n: int, method: str) -> torch.Tensor:
    w = _require_scores(scores, n, method)
    if bool(~torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError(f"{method}: vote weights must be finite and non-negative")
    return w


@CONSENSUS.register("majority")
def majority(answers: Sequence[str], scores=None):
    """Self-Consistency: one vote per rollout."""
    answer, support = weighted_vote(answers, torch.ones(len(answers), dtype=torch.float64))
    return answer, support, None


@CONSENSUS.register("top1")
def top1(answers: Sequence[str], scores=None):
    """Direct best-of-N: the answer of the highest-scoring rollout; score ties go to the lowest index.

    Support holds each answer's best rollout score.
    """
    s = _require_scores(scores, len(answers), "top1")
    best = int(torch.nonzero(s == s.max())[0])
    support: dict[str, float] = {}
    for a, v in zip(answers, s.tolist()):
        support[a] = max(support.get(a, -math.inf), v)
    return answers[best], support, best


@CONSENSUS.register("rwc")
def rank_weighted_consensus(answers: Sequence[str], scores=None):
    """Rank-Weighted Consensus (VisConf sec. 5): votes are the rank weights ``(N - r_i)/(N - 1)``.

    The vote is accumulated in the exact integers ``2 (N - r_i)`` so that answer ties are exact.
    """
    s = _require_scores(scores, len(answers), "rwc")
    n = s.numel()
    if n == 1:
        return answers[0], {answers[0]: 0.5}, None
    gt, eq = greater_equal_counts(s)
    answer, numer = weighted_vote(answers, rank_numerators(gt, eq, n).double())
    return answer, {a: v / (2.0 * (n - 1)) for a, v in numer.items()}, None


@CONSENSUS.register("wc")
def weighted_consensus(answers: Sequence[str], scores=None):
    """Raw-score Weighted Consensus (VisConf's WC ablation): ``w_i = Z_i``, scores must be >= 0."""
    answer, support = weighted_vote(answers, _non_negative_weights(scores, len(answers), "wc"))
    return answer, support, None


@CONSENSUS.register("borda")
def borda(answers: Sequence[str], scores=None, p: float = 0.5):
    """Borda voting of Self-Certainty (Kang et al. 2025): ``w_i = (N - r_i + 1)^p`` (default p = 0.5)."""
    s = _require_scores(scores, len(answers), "borda")
    answer, support = weighted_vote(answers, borda_weights(s, p))
    return answer, support, None


@CONSENSUS.register("weighted")
def weighted(answers: Sequence[str], scores=None):
    """Arbitrary non-negative per-rollout weights, e.g. Pixelis ``w_j`` (see :func:`pixelis_weights`)."""
    answer, support = weighted_vote(answers, _non_negative_weights(scores, len(answers), "weighted"))
    return answer, support, None


def pixelis_weights(entropy, calibration, visual_fidelity=None, reliability=None) -> torch.Tensor:
    """Pixelis uncertainty-weighted voting weights (sec. 3.2.3, "Consensus and abstention", without ``r_j``;
    supp. S6, "Calibrated voting weights" and step 3 of its pseudo-code, with it):
    ``w_j = exp(-H_j) * Cal_j * VisFid_j * r_j`` (factors left out count as 1).

    Args (all ``[N]``): ``entropy`` decisive-step entropy ``H_j``; ``calibration`` calibrated confidence
    ``Cal_j``; ``visual_fidelity`` pixel fidelity ``VisFid(tau_j)``; ``reliability`` Dawid-Skene ``r_j``.
    """
    h = torch.as_tensor(entropy, dtype=torch.float64)
    w = torch.exp(-h) * torch.as_tensor(calibration, dtype=torch.float64)
    for name, f in (("visual_fidelity", visual_fidelity), ("reliability", reliability)):
        if f is not None:
            f = torch.as_tensor(f, dtype=torch.float64)
            if f.shape != w.shape:
                raise ValueError(f"{name} has shape {tuple(f.shape)}, expected {tuple(w.shape)}")
            w = w * f
    if bool(~torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("pixelis_weights: inputs give non-finite or negative weights")
    return w


def aggregate(answers: Sequence[str], method: str, scores=None, *, delta: float | None = None,
              conformal_qhat: float | None = None, **params) -> Decision:
    """Apply the consensus rule ``method`` (a name in :data:`CONSENSUS`) to one question's rollouts.

    Args:
        answers: ``N`` answer labels (strings; unextractable ones share ``"<NO_ANSWER>"``).
        method: rule name; ``params`` go to the rule (e.g. ``p`` for ``borda``).
        scores: ``[N]`` per-rollout quality scores (or weights for ``wc`` / ``weighted``).
        delta: abstain when the normalised vote margin is below ``delta`` (Pixelis).
        conformal_qhat: split-conformal threshold from :func:`conformal_threshold`; abstain unless the
            prediction set holds exactly one answer.
    """
    rule = CONSENSUS[method]
    answers = check_answers(answers)
    answer, support, index = rule(answers, scores, **params)
    decision = Decision(answer=answer, support=support, index=index)
    vote_based = method != "top1"
    if vote_based:
        decision.margin = vote_margin(support) if sum(support.values()) > 0 else 0.0
    if delta is not None:
        if not vote_based:
            raise ValueError("a vote-margin threshold needs a vote-based rule, not 'top1'")
        decision.abstain |= decision.margin < delta
    if conformal_qhat is not None:
        if not vote_based:
            raise ValueError("a conformal set needs a vote-based rule, not 'top1'")
        decision.prediction_set = conformal_set(support, conformal_qhat)
        decision.abstain |= len(decision.prediction_set) != 1
    return decision

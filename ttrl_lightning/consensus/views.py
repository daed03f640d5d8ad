"""Two-view pseudo-labels: Self-Harmony's harmonic-mean selection and the dual-view majority baseline.

Self-Harmony (sec. "Harmonic-mean pseudo-label selection"): with ``p_0(a)`` and ``p_1(a)`` the empirical
frequencies of answer ``a`` among the rollouts of the original and the reframed question,

    ``y* = argmax_a 2 p_0(a) p_1(a) / (p_0(a) + p_1(a))``,

so an answer must be frequent in *both* views. Details follow the public implementation (ANCHORS):
unextractable answers are dropped before counting (but, by default, still count in each view's ``N_v``:
``p_v(a) = n_v(a) / N_v`` with ``N_v`` all of the view's rollouts; ``unextractable_in_denominator=False``
gives the other reading, ``N_v`` = the view's extractable answers only); an answer must
appear in both views unless Laplace smoothing (+1 to both counts) is on; ties go to the higher total count
``n_0 + n_1``, then to the answer seen earliest (original view first); no common answer gives no label.
"""
from __future__ import annotations

from typing import Sequence

from ..answers import NO_ANSWER
from .abstention import vote_margin
from .decision import Decision
from .rules import majority
from .voting import check_answers

__all__ = ["harmonic_mean_select", "dual_view_majority"]


def _counts(answers: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in answers:
        if a != NO_ANSWER:
            out[a] = out.get(a, 0) + 1
    return out


def harmonic_mean_select(answers_original: Sequence[str], answers_reframed: Sequence[str],
                         laplace: bool = False, unextractable_in_denominator: bool = True) -> Decision:
    """Self-Harmony's Harmonic Mean Score (HMS) pseudo-label.

    Support holds ``HM(a) = 2 n_0 n_1 / (n_0 N_1 + n_1 N_0)`` (equal to ``2 p_0 p_1 / (p_0 + p_1)``), computed
    as one division of exact integers so that equal harmonic means compare equal.
    ``Decision.abstain`` is set (and ``answer`` is ``None``) when no answer is common to both views.

    ``unextractable_in_denominator``: ``True`` (default, the public implementation's reading) divides by
    ``N_v`` = all rollouts of view ``v``, so a view with many unextractable answers weighs its answers down;
    ``False`` divides by the number of *extractable* answers of view ``v`` (frequencies among answers given).
    The two readings can choose differently when the views differ in their unextractable counts.
    """
    a0 = check_answers(answers_original, name="answers_original")
    a1 = check_answers(answers_reframed, name="answers_reframed")
    c0, c1 = _counts(a0), _counts(a1)
    if unextractable_in_denominator:
        big_n0, big_n1 = len(a0), len(a1)
    else:
        big_n0, big_n1 = sum(c0.values()), sum(c1.values())
    order: list[str] = []
    for a in a0 + a1:
        if a != NO_ANSWER and a not in order:
            order.append(a)
    support: dict[str, float] = {}
    key: dict[str, tuple] = {}
    for rank, a in enumerate(order):
        n0, n1 = c0.get(a, 0), c1.get(a, 0)
        if laplace:
            n0, n1 = n0 + 1, n1 + 1
            hm = 2 * n0 * n1 / (n0 * (big_n1 + 1) + n1 * (big_n0 + 1))
        elif n0 == 0 or n1 == 0:
            continue
        else:
            hm = 2 * n0 * n1 / (n0 * big_n1 + n1 * big_n0)
        support[a] = hm
        key[a] = (hm, n0 + n1, -rank)
    if not support:
        return Decision(answer=None, support={}, abstain=True, margin=0.0)
    best = max(support, key=lambda a: key[a])
    return Decision(answer=best, support=support, abstain=False, margin=vote_margin(support))


def dual_view_majority(answers_original: Sequence[str], answers_reframed: Sequence[str]) -> Decision:
    """Majority vote over the union of both views' rollouts (original first for the tie rule)."""
    a0 = check_answers(answers_original, name="answers_original")
    a1 = check_answers(answers_reframed, name="answers_reframed")
    answer, support, _ = majority(a0 + a1)
    return Decision(answer=answer, support=support, margin=vote_margin(support))

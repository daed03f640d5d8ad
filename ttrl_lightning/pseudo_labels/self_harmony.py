"""``self_harmony``: Self-Harmony's two-view pseudo-label and gated rewards (Self-Harmony, sec. 3).

Rollouts carry a ``view``: ``"original"`` (the Solver answering the question ``x``) or ``"reframed"`` (one
fused Reframe-and-Solve generation: it rewrites ``x`` into ``x'`` and solves ``x'``).

Pseudo-label (sec. "Harmonic-mean pseudo-label selection", ``consensus.harmonic_mean_select``)::

    y* = argmax_a 2 p_0(a) p_1(a) / (p_0(a) + p_1(a))

over answer equivalence classes formed across both views. **HMS frequencies**: unextractable answers never
compete, and by default they *count* in each view's denominator, ``p_v(a) = n_v(a) / N_v`` with ``N_v``
all rollouts of view ``v`` (the public implementation's reading); ``unextractable_in_denominator=False``
divides by the view's extractable answers only. No answer common to both views abstains (``label=None``,
rewards 0), unless ``laplace=True`` (+1 to both counts). ``warmup_majority=True`` (the warm-up steps of the
public implementation) uses the TTRL majority over both views' rollouts instead (``majority`` labeler's
rule, an unextractable majority abstains).

Rewards (sec. "Reward design"):

* original view, ``R_solve(y) = 1[y = y*]``;
* reframed view, gated:
  ``R_fused(y') = (1 - w_f * format_penalty(y')) * (1 - w_d * div_penalty) * 1[y' = y*]``
  with defaults ``w_f = 0.3``, ``w_d = 0.2``; ``format_penalty = 1 - format_score`` (the share of the
  three fused sections present and non-placeholder, :mod:`.fused_format`; or ``format_scores`` given per
  reframed rollout); ``div_penalty`` one of

  - ``"js"`` (default, the paper's): the consistency penalty ``1 - JS(p_0, p_1) / ln 2`` over the two views'
    distributions of *extractable* answers, ``JS = KL(p_0||m)/2 + KL(p_1||m)/2``, ``m = (p_0 + p_1)/2``
    (natural log); 0 when a view has no extractable answer or both views together hold one distinct
    answer. It is one number per question (shared by its reframed rollouts): a reframing that merely
    restates ``x`` yields the same answer distribution and is penalised;
  - ``"sharpness"`` (the public implementation's default):
    ``min(1, (m - target)^2 / (N^2 / 4))`` with ``m`` the reframed rollouts whose answer is ``y*``, ``N``
    the number of reframed rollouts and ``target = sharpness_target`` (default 4);
  - ``"none"``: 0.

``info``: ``hms`` (answer -> HM; in warm-up ``support`` and ``majority_ratio`` instead), ``margin``,
``div_penalty``, ``format_scores`` (per reframed rollout, in order), ``penalty``, ``warmup``.
"""
from __future__ import annotations

import math
from typing import Sequence

from ..answers import NO_ANSWER
from ..consensus import harmonic_mean_select
from ..data.pool_schema import VIEWS
from ..registry import Registry
from ..answers.fused_format import fused_format_score
from .pseudo_label import PSEUDO_LABELERS, PseudoLabel, PseudoLabelError
from .majority import majority_from_answers
from .rollouts import question_votes
from .question_votes import QuestionVotes, matches

__all__ = ["self_harmony_label", "DIVERSITY_PENALTIES", "js_consistency_penalty", "sharpness_penalty"]

#: ``name -> penalty(answers_original, answers_reframed, label, target) -> float in [0, 1]``
DIVERSITY_PENALTIES: Registry = Registry("Self-Harmony diversity penalty")


def _distribution(answers: Sequence[str]) -> dict[str, float]:
    kept = [a for a in answers if a != NO_ANSWER]
    out: dict[str, float] = {}
    for a in kept:
        out[a] = out.get(a, 0.0) + 1.0 / len(kept)
    return out


@DIVERSITY_PENALTIES.register("js")
def js_consistency_penalty(answers_original: Sequence[str], answers_reframed: Sequence[str],
                           label: str | None = None, target: float = 4) -> float:
    """``1 - JS(p_0, p_1) / ln 2`` over the views' extractable-answer distributions (0 when a view has none
    or only one distinct answer exists)."""
    p0, p1 = _distribution(answers_original), _distribution(answers_reframed)
    support = set(p0) | set(p1)
    if not p0 or not p1 or len(support) <= 1:
        return 0.0
    js = 0.0
    for a in support:
        m = (p0.get(a, 0.0) + p1.get(a, 0.0)) / 2
        for p in (p0.get(a, 0.0), p1.get(a, 0.0)):
            if p > 0:
                js += 0.5 * p * math.log(p / m)
    return min(1.0, max(0.0, 1.0 - js / math.log(2)))


@DIVERSITY_PENALTIES.register("sharpness")
def sharpness_penalty(answers_original: Sequence[str], answers_reframed: Sequence[str],
                      label: str | None = None, target: float = 4) -> float:
    """``min(1, (#{reframed answers = y*} - target)^2 / (N^2 / 4))``, ``N`` = number of reframed rollouts."""
    n = len(answers_reframed)
    hits = sum(1 for a in answers_reframed if label is not None and a == label)
    return min(1.0, (hits - target) ** 2 / (n * n / 4))


@DIVERSITY_PENALTIES.register("none")
def no_penalty(answers_original, answers_reframed, label=None, target: float = 4) -> float:
    """No diversity penalty."""
    return 0.0


def _check_weight(name: str, w: float) -> float:
    if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0.0 <= w <= 1.0:
        raise PseudoLabelError(f"self_harmony: {name} must be a number in [0, 1], got {w!r}")
    return float(w)


def _format_scores(group: QuestionVotes, reframed: list[int], format_scores, w_f: float) -> list[float]:
    if format_scores is not None:
        scores = list(format_scores)
        if len(scores) != len(reframed):
            raise PseudoLabelError(f"self_harmony: format_scores has {len(scores)} entries but there are "
                                   f"{len(reframed)} reframed rollouts")
        for k, s in enumerate(scores):
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 <= s <= 1.0:
                raise PseudoLabelError(f"self_harmony: format_scores[{k}] must be a number in [0, 1], got {s!r}")
        return [float(s) for s in scores]
    out = []
    for j in reframed:
        text = group.texts[j]
        if text is None and w_f > 0:
            raise PseudoLabelError(f"self_harmony: rollouts[{j}].text is missing; the format penalty needs the "
                                   "fused output's text (give format_scores, or w_f=0)")
        out.append(fused_format_score(text) if text is not None else 1.0)
    return out


@PSEUDO_LABELERS.register("self_harmony")
def self_harmony_label(votes, *, choices=None, w_f: float = 0.3, w_d: float = 0.2,
                       penalty: str = "js", sharpness_target: float = 4, laplace: bool = False,
                       unextractable_in_denominator: bool = True, warmup_majority: bool = False,
                       format_scores: Sequence[float] | None = None) -> PseudoLabel:
    """HMS pseudo-label and Self-Harmony's rewards over both views; see the module docstring.

    Needs at least one rollout of each view. Rewards are returned in the order the rollouts were given.
    """
    group = question_votes(votes, choices, "self_harmony")
    w_f, w_d = _check_weight("w_f", w_f), _check_weight("w_d", w_d)
    penalty_fn = DIVERSITY_PENALTIES[penalty]
    original, reframed = group.view_rows(VIEWS[0]), group.view_rows(VIEWS[1])
    for name, idx in ((VIEWS[0], original), (VIEWS[1], reframed)):
        if not idx:
            raise PseudoLabelError(f"self_harmony: no rollout of view {name!r}; Self-Harmony needs both the "
                                   "original and the reframed view (use 'majority' for one view)")
    answers = group.answers  # classes shared across views
    a0, a1 = [answers[j] for j in original], [answers[j] for j in reframed]
    fmt = _format_scores(group, reframed, format_scores, w_f)
    if warmup_majority:
        base = majority_from_answers(a0 + a1)
        label, info = base.label, {"support": base.info["support"], "margin": base.info["margin"],
                                   "majority_ratio": base.info["majority_ratio"]}
    else:
        decision = harmonic_mean_select(a0, a1, laplace=laplace,
                                        unextractable_in_denominator=unextractable_in_denominator)
        label, info = decision.answer, {"hms": dict(decision.support), "margin": decision.margin}
    info.update(warmup=warmup_majority, format_scores=fmt, penalty=penalty)
    if label is None:
        info["div_penalty"] = 0.0
        info["abstain_reason"] = ("unextractable answers are the majority" if warmup_majority
                                  else "no answer common to both views")
        return PseudoLabel(None, [0.0] * len(group), True, info)
    div = float(penalty_fn(a0, a1, label, sharpness_target))
    info["div_penalty"] = div
    hit = matches(answers, label)
    rewards = list(hit)
    gate_d = 1.0 - w_d * div
    for k, j in enumerate(reframed):
        rewards[j] = (1.0 - w_f * (1.0 - fmt[k])) * gate_d * hit[j]
    return PseudoLabel(label, rewards, False, info)

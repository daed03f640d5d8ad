"""``majority``: TTRL's majority-vote pseudo-label (Zuo et al. 2025, sec. 3 "Majority voting reward").

``y* = argmax_a #{i : y_i = a}`` over the extracted answers of the question's rollouts (answer equivalence
classes, ``answers.canonical_answer_classes``); reward ``r_i = 1[y_i = y*]``.

* Ties follow the consensus tie rule (``consensus.aggregate(..., "majority")``): the answer whose earliest
  supporting rollout comes first wins.
* Unextractable answers share one label (:data:`~ttrl_lightning.answers.NO_ANSWER`) that takes part in the
  vote; when it wins the question abstains (``label=None``, all rewards 0, left out of the loss), otherwise
  unextractable rollouts get reward 0. Departure from TTRL's code, which drops unextractable answers before
  the vote and labels the most frequent extractable one, giving the label "None" (rewards 0, trained on)
  only when every vote is unextractable: where unextractable votes are the plurality, TTRL labels and we
  abstain (docs/ttrl.md, "Against TTRL's code").
* ``info``: ``majority_ratio`` (TTRL's name: winner's votes / J, J every vote the labeler is given, i.e.
  all M votes of the question, not the N trained; computed also when abstaining),
  ``support`` (answer -> votes), ``margin`` (normalised vote margin).

Collapse guards (options; all off by default, so ``majority`` is TTRL's rule unless one is given). Shares are
over the J votes, unextractable ones included:

* **consensus gate** (SCRL): ``min_share`` and ``min_margin``. The winner ``y*`` labels the question only if
  ``share(y*) >= min_share`` and ``share(y*) - share(y2) > min_margin`` (``y2`` the runner-up answer class, the
  unextractable one included; 0 with a single class), SCRL's defaults being 0.5 and 0.15. A question that fails
  abstains (``label=None``, rewards 0) with ``PseudoLabel.negative`` set: under RESTRAIN's negative branch
  (``advantage.negative_shift`` delta > 0) its rows are trained with reward 0 and advantage ``-delta`` instead
  of left out.
* **locked questions** (SeRL's upper bound; TTRL-Guard's RCSU): ``max_share``. A question whose winner holds more
  than ``max_share`` of the votes is left out of the loss (``abstain``, rewards 0, the label kept in ``label`` for
  the metrics, ``info["locked"]``): its group would push every vote toward an answer it already has.

``soft_majority`` (SRT's ``soft_reward``, TTRV; RESTRAIN weights every answer): ``r_i = share(y_i)`` among the
question's *extractable* votes, an unextractable vote 0; the label (for the metrics) is the majority answer,
and a question whose every vote is unextractable abstains.
"""
from __future__ import annotations

from typing import Sequence

from ..answers import NO_ANSWER
from ..consensus import aggregate
from ..errors import Bounds, shown
from .pseudo_label import PSEUDO_LABELERS, PseudoLabel, PseudoLabelError
from .rollouts import question_votes
from .question_votes import matches

__all__ = ["majority_label", "majority_from_answers", "majority_options", "checked_majority_options",
           "has_consensus_gate", "soft_majority_label"]


_SHARE = Bounds(low=0, high=1, optional=True)


def _share(value, name: str) -> float | None:
    if value not in _SHARE:
        raise PseudoLabelError(f"majority: {name} must be a share {_SHARE}, got {shown(value)}")
    return None if value is None else float(value)


def majority_options(*, min_share=None, min_margin=None, max_share=None) -> tuple[float | None, ...]:
    """The collapse guards' values ``(min_share, min_margin, max_share)``, each a share in [0, 1] or None;
    ``PseudoLabelError`` names the first that is not (a ``voting.options`` check refuses it before the run)."""
    return _share(min_share, "min_share"), _share(min_margin, "min_margin"), _share(max_share, "max_share")


def checked_majority_options(*, min_share=None, min_margin=None, max_share=None) -> tuple[float | None, ...]:
    """:func:`majority_options`, and refused (``PseudoLabelError``, one line) where together they can never label
    a question, so a run would train on nothing: a gate above the lock (``min_share`` > ``max_share``: a
    question that passes the gate is locked), a margin the lock leaves no room for (``min_margin`` >=
    ``max_share``: the lead is at most the winner's share), or a margin no lead exceeds (``min_margin`` 1). The
    check of ``voting.options`` when a run is configured; a single call of the labeler applies the guards in
    their order (the gate first) whatever they are."""
    low, margin, high = majority_options(min_share=min_share, min_margin=min_margin, max_share=max_share)
    if low is not None and high is not None and low > high:
        raise PseudoLabelError(f"majority: min_share {low:g} is above max_share {high:g}: a question that passes "
                               "the consensus gate is locked, so none is ever labelled")
    if margin is not None and high is not None and margin >= high:
        raise PseudoLabelError(f"majority: min_margin {margin:g} is not below max_share {high:g}: a lead above the "
                               "margin needs a share above the lock, so no question is ever labelled")
    if margin is not None and margin >= 1:
        raise PseudoLabelError(f"majority: min_margin {margin:g}: no lead over the runner-up exceeds it, so no "
                               "question is ever labelled")
    return low, margin, high


def has_consensus_gate(options) -> bool:
    """Whether ``majority``'s ``options`` hold a consensus gate that can fail (``min_share`` above 0, or any
    ``min_margin``): what ``advantage.negative_shift`` (RESTRAIN's negative branch) trains on."""
    low, margin, _ = majority_options(**{k: options.get(k) for k in ("min_share", "min_margin", "max_share")})
    return (low is not None and low > 0) or margin is not None


def majority_from_answers(answers: Sequence[str], *, min_share: float | None = None,
                          min_margin: float | None = None, max_share: float | None = None) -> PseudoLabel:
    """The majority pseudo-label over canonical answers (shared by ``self_harmony``'s warm-up), with the
    collapse guards of the module docstring."""
    min_share, min_margin, max_share = majority_options(min_share=min_share, min_margin=min_margin,
                                                        max_share=max_share)
    decision = aggregate(answers, "majority")
    J = len(answers)
    ratio = decision.support[decision.answer] / J
    info = {"support": dict(decision.support), "margin": decision.margin, "majority_ratio": ratio}
    abstained = [0.0] * J
    if decision.answer == NO_ANSWER:
        info["abstain_reason"] = "unextractable answers are the majority"
        return PseudoLabel(None, abstained, True, info)
    counts = sorted(decision.support.values(), reverse=True)
    lead = (counts[0] - (counts[1] if len(counts) > 1 else 0)) / J
    if (min_share is not None and ratio < min_share) or (min_margin is not None and not lead > min_margin):
        info["abstain_reason"] = (f"consensus gate: top share {ratio:.3f} (min {min_share}), lead over the "
                                  f"runner-up {lead:.3f} (must exceed {min_margin})")
        info["gate"] = "failed"
        return PseudoLabel(None, abstained, True, info, negative=True)
    if max_share is not None and ratio > max_share:
        info["abstain_reason"] = f"locked: top share {ratio:.3f} > max_share {max_share}"
        info["locked"] = True
        return PseudoLabel(decision.answer, abstained, True, info)
    return PseudoLabel(decision.answer, matches(answers, decision.answer), False, info)


@PSEUDO_LABELERS.register("majority")
def majority_label(votes, *, choices=None, min_share: float | None = None, min_margin: float | None = None,
                   max_share: float | None = None) -> PseudoLabel:
    """TTRL majority vote over all given rollouts (every view pooled), with the optional collapse guards
    ``min_share`` / ``min_margin`` (SCRL's gate) and ``max_share`` (locked questions); see the module
    docstring."""
    return majority_from_answers(question_votes(votes, choices, "majority").answers, min_share=min_share,
                                 min_margin=min_margin, max_share=max_share)


@PSEUDO_LABELERS.register("soft_majority")
def soft_majority_label(votes, *, choices=None) -> PseudoLabel:
    """``r_i = #{j : y_j = y_i} / #{j : y_j extractable}`` for an extractable vote, 0 otherwise (SRT's
    ``soft_reward``); the label is the majority among the extractable votes (module docstring)."""
    answers = question_votes(votes, choices, "soft_majority").answers
    counts: dict[str, int] = {}
    for a in answers:
        if a != NO_ANSWER:
            counts[a] = counts.get(a, 0) + 1
    info: dict = {"reward": "share of the extractable votes (SRT soft_reward)"}
    if not counts:
        info.update(majority_ratio=0.0, abstain_reason="every vote is unextractable")
        return PseudoLabel(None, [0.0] * len(answers), True, info)
    extractable = sum(counts.values())
    decision = aggregate([a for a in answers if a != NO_ANSWER], "majority")
    info.update(support=dict(decision.support), majority_ratio=counts[decision.answer] / len(answers))
    return PseudoLabel(decision.answer, [counts[a] / extractable if a != NO_ANSWER else 0.0 for a in answers],
                       False, info)

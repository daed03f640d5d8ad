"""``majority``: TTRL's majority-vote pseudo-label (Zuo et al. 2025, sec. 3 "Majority voting reward").

``y* = argmax_a #{i : y_i = a}`` over the extracted answers of the question's rollouts (answer equivalence
classes, ``answers.canonical_answer_classes``); reward ``r_i = 1[y_i = y*]``.

* Ties follow the consensus tie rule (``consensus.aggregate(..., "majority")``): the answer whose earliest
  supporting rollout comes first wins.
* Unextractable answers share one label (:data:`~ttrl_lightning.answers.NO_ANSWER`, TTRL's "None"); when
  it wins the vote the question abstains (``label=None``, all rewards 0), otherwise unextractable rollouts
  get reward 0.
* ``info``: ``majority_ratio`` (TTRL's name: winner's votes / J, J every vote the labeler is given, i.e.
  all M votes of the question, not the N trained; computed also when abstaining),
  ``support`` (answer -> votes), ``margin`` (normalised vote margin).
"""
from __future__ import annotations

from typing import Sequence

from ..answers import NO_ANSWER
from ..consensus import aggregate
from .pseudo_label import PSEUDO_LABELERS, PseudoLabel
from .rollouts import question_votes
from .question_votes import matches

__all__ = ["majority_label", "majority_from_answers"]


def majority_from_answers(answers: Sequence[str]) -> PseudoLabel:
    """The majority pseudo-label over canonical answers (shared by ``self_harmony``'s warm-up)."""
    decision = aggregate(answers, "majority")
    ratio = decision.support[decision.answer] / len(answers)
    info = {"support": dict(decision.support), "margin": decision.margin, "majority_ratio": ratio}
    if decision.answer == NO_ANSWER:
        info["abstain_reason"] = "unextractable answers are the majority"
        return PseudoLabel(None, [0.0] * len(answers), True, info)
    return PseudoLabel(decision.answer, matches(answers, decision.answer), False, info)


@PSEUDO_LABELERS.register("majority")
def majority_label(votes, *, choices=None) -> PseudoLabel:
    """TTRL majority vote over all given rollouts (every view pooled); see the module docstring."""
    return majority_from_answers(question_votes(votes, choices, "majority").answers)

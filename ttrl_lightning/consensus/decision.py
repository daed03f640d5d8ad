"""The result of a consensus rule."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Decision:
    """What a consensus rule chose for one question.

    Attributes:
        answer: the chosen answer label, or ``None`` when the rule has no answer (e.g. HMS with no answer
            common to both views).
        support: answer -> vote mass, in order of each answer's earliest supporting rollout.
        abstain: ``True`` when the decision should not be acted on (no answer, vote margin below ``delta``,
            or a conformal prediction set that is not a single answer; Pixelis appendix 6, mask ``m(q)``).
        margin: normalised vote margin ``(s_1 - s_2) / sum_a s(a)`` (1.0 with a single answer).
        index: for top-1 rules, the index of the chosen rollout.
        prediction_set: the split-conformal prediction set, when a threshold was given.
    """

    answer: str | None
    support: dict[str, float] = field(default_factory=dict)
    abstain: bool = False
    margin: float = 0.0
    index: int | None = None
    prediction_set: list[str] | None = None

"""Answer classes: one question's answers grouped for voting (VisConf appendix A)."""
from __future__ import annotations

from typing import Sequence

from . import equivalence
from .equivalence import answers_equal, labelling_budget
from .label import NO_ANSWER

__all__ = ["canonical_answer_classes"]


def canonical_answer_classes(answers: Sequence[str], *, budget_s: float | None = None
                             ) -> tuple[list[int], list[str]]:
    """Group one question's answers into equivalence classes for voting.

    Rule (math equivalence can be non-transitive, e.g. ``0.5 ~ 50\\% ~ 50``): answers are visited in order;
    each is compared with :func:`answers_equal` to every class representative in order of creation and
    joins the first class that matches, else opens a new class with itself as representative. All
    :data:`NO_ANSWER` strings share one class (VisConf: unextractable responses get one shared label),
    which matches nothing else.

    The symbolic work of one call is bounded by ``budget_s`` seconds in all (``equivalence.labelling_budget``):
    past it, the remaining comparisons use the cheap rules alone and are counted in ``equivalence_stats()
    ["starved"]``, so 64 pathological votes cost at most that, not votes x classes x the comparison budget.

    Args:
        answers: ``[N]`` extracted answers.
        budget_s: the call's symbolic budget in seconds (default ``equivalence.LABELLING_BUDGET_S``).
    Returns:
        ``(class_ids, representatives)``: ``class_ids[i]`` in ``0..C-1`` numbered by first occurrence, and
        ``representatives[c]`` the first answer of class ``c``.
    """
    if isinstance(answers, str) or not isinstance(answers, Sequence):
        raise TypeError(f"canonical_answer_classes expects a list of str, got {type(answers).__name__}")
    ids: list[int] = []
    reps: list[str] = []
    with labelling_budget(equivalence.LABELLING_BUDGET_S if budget_s is None else budget_s):
        _group(answers, ids, reps)
    return ids, reps


def _group(answers: Sequence[str], ids: list[int], reps: list[str]) -> None:
    no_answer_class: int | None = None
    for i, ans in enumerate(answers):
        if not isinstance(ans, str):
            raise TypeError(f"answers[{i}] is {type(ans).__name__}, expected str")
        if ans == NO_ANSWER:
            if no_answer_class is None:
                no_answer_class = len(reps)
                reps.append(ans)
            ids.append(no_answer_class)
            continue
        for c, rep in enumerate(reps):
            if c != no_answer_class and answers_equal(ans, rep):
                ids.append(c)
                break
        else:
            ids.append(len(reps))
            reps.append(ans)

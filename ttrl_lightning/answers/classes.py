"""Answer classes: one question's answers grouped for voting (VisConf appendix A)."""
from __future__ import annotations

from typing import Sequence

from .equivalence import answers_equal
from .label import NO_ANSWER

__all__ = ["canonical_answer_classes"]


def canonical_answer_classes(answers: Sequence[str]) -> tuple[list[int], list[str]]:
    """Group one question's answers into equivalence classes for voting.

    Rule (math equivalence can be non-transitive, e.g. ``0.5 ~ 50\\% ~ 50``): answers are visited in order;
    each is compared with :func:`answers_equal` to every class representative in order of creation and
    joins the first class that matches, else opens a new class with itself as representative. All
    :data:`NO_ANSWER` strings share one class (VisConf: unextractable responses get one shared label),
    which matches nothing else.

    Args:
        answers: ``[N]`` extracted answers.
    Returns:
        ``(class_ids, representatives)``: ``class_ids[i]`` in ``0..C-1`` numbered by first occurrence, and
        ``representatives[c]`` the first answer of class ``c``.
    """
    if isinstance(answers, str) or not isinstance(answers, Sequence):
        raise TypeError(f"canonical_answer_classes expects a list of str, got {type(answers).__name__}")
    ids: list[int] = []
    reps: list[str] = []
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
    return ids, reps

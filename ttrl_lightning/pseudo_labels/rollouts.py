"""Reading one question's rollouts (pool-schema rollout dicts): checks, answers and per-token signals.

A rollout is a dict as in :mod:`ttrl_lightning.data.pool` (what ``ttrl bon`` reads): ``answer`` (``None``:
extracted from ``text``), ``text``, ``view`` (``"original"`` / ``"reframed"``, absent: original) and
optional per-token arrays (``entropy``, ``self_certainty``, ``logprob``, ``visual_engagement``,
``image_attention``). Every error names the rollout (``rollouts[j]``) and the field.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch

from ..answers import NO_ANSWER, canonical_answer_classes, extract_answer
from ..data.pool_schema import TOKEN_FIELDS, VIEWS
from ..errors import UserError

__all__ = ["PseudoLabelError", "check_rollouts", "canonical_answers", "rollout_views", "token_signal",
           "has_signal", "matches"]


class PseudoLabelError(UserError):
    """Rollouts a pseudo-labeler cannot label: the message names the rollout and the field."""


def check_rollouts(rollouts: Sequence[dict], method: str) -> list[dict]:
    """A non-empty list of rollout dicts whose per-token arrays, where given, are finite numbers; else
    :class:`PseudoLabelError` (every labeler checks every signal it is given, used or not: a NaN means the
    rollouts are corrupt, and a label built beside it is not to be trusted)."""
    if isinstance(rollouts, (str, bytes, Mapping)) or not isinstance(rollouts, Sequence):
        raise PseudoLabelError(f"{method}: rollouts must be a list of rollout dicts, got {type(rollouts).__name__}")
    out = list(rollouts)
    if not out:
        raise PseudoLabelError(f"{method}: rollouts is empty (one question needs at least one rollout)")
    for j, ro in enumerate(out):
        if not isinstance(ro, Mapping):
            raise PseudoLabelError(f"{method}: rollouts[{j}] must be a dict, got {type(ro).__name__}")
        for name in TOKEN_FIELDS:
            if ro.get(name) is not None:
                token_signal(out, j, name, method)
    return out


def _answer(ro: Mapping, j: int, choices, method: str) -> str:
    ans = ro.get("answer")
    if ans is not None:
        if not isinstance(ans, str):
            raise PseudoLabelError(f"{method}: rollouts[{j}].answer must be a string or None, "
                                   f"got {type(ans).__name__}")
        return ans
    text = ro.get("text")
    if text is not None and not isinstance(text, str):
        raise PseudoLabelError(f"{method}: rollouts[{j}].text must be a string or None, got {type(text).__name__}")
    return extract_answer(text, choices)


def canonical_answers(rollouts: Sequence[Mapping], choices=None, method: str = "pseudo-labeler") -> list[str]:
    """Each rollout's answer replaced by its equivalence class's representative
    (``answers.canonical_answer_classes``), so that string equality is answer equivalence; unextractable
    answers are :data:`~ttrl_lightning.answers.NO_ANSWER`."""
    raw = [_answer(ro, j, choices, method) for j, ro in enumerate(rollouts)]
    ids, reps = canonical_answer_classes(raw)
    return [reps[c] for c in ids]


def rollout_views(rollouts: Sequence[Mapping], method: str) -> list[str]:
    """Each rollout's view (absent or ``None``: ``"original"``); anything else must be a string of
    :data:`VIEWS`, as in the pool schema (``data.pool.validate_record``): ``0`` or ``""`` is an error."""
    out = []
    for j, ro in enumerate(rollouts):
        view = ro.get("view")
        if view is None:
            view = VIEWS[0]
        elif not isinstance(view, str) or view not in VIEWS:
            raise PseudoLabelError(f"{method}: rollouts[{j}].view must be one of {VIEWS}, got {view!r}")
        out.append(view)
    return out


def has_signal(rollouts: Sequence[Mapping], name: str) -> list[bool]:
    return [ro.get(name) is not None for ro in rollouts]


def token_signal(rollouts: Sequence[Mapping], j: int, name: str, method: str) -> torch.Tensor:
    """Rollout ``j``'s per-token array ``name`` as float64; missing, empty, non-numeric, NaN or inf values
    raise :class:`PseudoLabelError` naming the rollout, the field and the token."""
    arr = rollouts[j].get(name)
    where = f"{method}: rollouts[{j}].{name}"
    if arr is None:
        raise PseudoLabelError(f"{where} is missing; {method} needs per-token {name!r} on every rollout")
    try:
        x = torch.as_tensor(arr, dtype=torch.float64).reshape(-1)
    except (TypeError, ValueError):
        raise PseudoLabelError(f"{where} must be a list of numbers") from None
    if x.numel() == 0:
        raise PseudoLabelError(f"{where} is empty")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        k = int(torch.nonzero(bad)[0])
        v = float(x[k])
        raise PseudoLabelError(f"{where} holds {'NaN' if math.isnan(v) else v} at token {k}")
    return x


def matches(answers: Sequence[str], label: str | None) -> list[float]:
    """``1[answer == label]`` per rollout over canonical answers; :data:`NO_ANSWER` and a ``None`` label
    never match."""
    if label is None or label == NO_ANSWER:
        return [0.0] * len(answers)
    return [1.0 if a == label else 0.0 for a in answers]

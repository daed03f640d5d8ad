"""Reading one question's rollouts given as pool-schema dicts into the :class:`~.votes.QuestionVotes` labelers read.

A rollout is a dict as in :mod:`ttrl_lightning.data.pool_schema` (what a pool file holds): ``answer``
(``None``: extracted from ``text``), ``text``, ``view`` (``"original"`` / ``"reframed"``, absent: original)
and optional per-token arrays (``entropy``, ``self_certainty``, ``logprob``, ``visual_engagement``,
``image_attention``). Every error names the rollout (``rollouts[j]``) and the field. An engine's rollouts
skip the dicts (``QuestionVotes.from_tensors``).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from ..answers import extract_answer
from ..data.pool_schema import TOKEN_FIELDS, VIEWS, PoolError, token_array
from ..errors import checked_list
from .pseudo_label import PseudoLabelError
from .question_votes import TokenColumn, QuestionVotes

__all__ = ["PseudoLabelError", "question_votes", "check_rollouts", "canonical_answers"]


def check_rollouts(rollouts: Sequence[dict], method: str) -> list[dict]:
    """A non-empty list of rollout dicts, else :class:`PseudoLabelError`."""
    return checked_list(rollouts, f"{method}: rollouts", Mapping, "dict", error=PseudoLabelError,
                        empty_hint=" (one question needs at least one rollout)")


def question_votes(rollouts: QuestionVotes | Sequence[dict], choices=None, method: str = "pseudo-labeler") -> QuestionVotes:
    """The :class:`QuestionVotes` a labeler reads: ``rollouts`` itself when it is one (its answers were read when
    it was built; ``choices`` is then unused), else the group of the checked rollout dicts: each answer read
    (``answer``, else extracted from ``text`` with ``choices``), each view, and every per-token array given,
    used or not (a NaN means the rollouts are corrupt: the group refuses it, and the message is prefixed with
    ``method``)."""
    if isinstance(rollouts, QuestionVotes):
        return rollouts
    rollouts = check_rollouts(rollouts, method)
    texts = [_text(ro, j, method) for j, ro in enumerate(rollouts)]
    raw = [_answer(ro, j, texts[j], choices, method) for j, ro in enumerate(rollouts)]
    views = [_view(ro, j, method) for j, ro in enumerate(rollouts)]
    columns = {}
    for name in TOKEN_FIELDS:
        rows = [None if ro.get(name) is None else _token_array(ro[name], j, name, method)
                for j, ro in enumerate(rollouts)]
        if any(r is not None for r in rows):
            lengths = torch.tensor([0 if r is None else r.numel() for r in rows], dtype=torch.int64)
            values = torch.zeros(len(rows), int(lengths.max()), dtype=torch.float64)
            for j, r in enumerate(rows):
                if r is not None:
                    values[j, :r.numel()] = r
            columns[name] = TokenColumn(values, lengths)
    try:
        return QuestionVotes(tuple(raw), tuple(texts), tuple(views), columns)
    except PseudoLabelError as err:
        raise PseudoLabelError(f"{method}: {err}") from None


def canonical_answers(rollouts: Sequence[Mapping], choices=None, method: str = "pseudo-labeler") -> list[str]:
    """Each rollout's answer replaced by its equivalence class's representative (``QuestionVotes.answers``)."""
    return list(question_votes(rollouts, choices, method).answers)


def _text(ro: Mapping, j: int, method: str) -> str | None:
    text = ro.get("text")
    if text is not None and not isinstance(text, str):
        raise PseudoLabelError(f"{method}: rollouts[{j}].text must be a string or None, got {type(text).__name__}")
    return text


def _answer(ro: Mapping, j: int, text: str | None, choices, method: str) -> str:
    ans = ro.get("answer")
    if ans is None:
        return extract_answer(text, choices)
    if not isinstance(ans, str):
        raise PseudoLabelError(f"{method}: rollouts[{j}].answer must be a string or None, got {type(ans).__name__}")
    return ans


def _view(ro: Mapping, j: int, method: str) -> str:
    """The rollout's view (absent or ``None``: ``"original"``); anything else must be a string of
    :data:`VIEWS`, as in the pool schema (``data.pool_schema.validate_record``): ``0`` or ``""`` is an error."""
    view = ro.get("view")
    if view is None:
        return VIEWS[0]
    if not isinstance(view, str) or view not in VIEWS:
        raise PseudoLabelError(f"{method}: rollouts[{j}].view must be one of {VIEWS}, got {view!r}")
    return view


def _token_array(arr, j: int, name: str, method: str) -> torch.Tensor:
    """Rollout ``j``'s per-token ``name`` as float64, checked as a pool file's are (``data.pool_schema.
    token_array``: numbers only, finite in float32, shares in [0, 1]); a bad one raises
    :class:`PseudoLabelError` naming ``method``, the rollout and the field."""
    if hasattr(arr, "tolist"):  # a numpy array or a tensor
        arr = arr.tolist()
    try:
        return torch.tensor(token_array(arr, f"rollouts[{j}]", name), dtype=torch.float64)
    except PoolError as err:
        raise PseudoLabelError(f"{method}: {err}") from None

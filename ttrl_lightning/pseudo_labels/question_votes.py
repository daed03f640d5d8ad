"""One question's votes as columns: what every pseudo-labeler reads.

A :class:`QuestionVotes` holds the ``J`` votes of one question (every view; in a TTRL step J = M times the
number of views, and N, the rows trained on, is the module's business):

* ``answers`` ``[J]``: each vote's answer as its equivalence class's representative
  (``answers.canonical_answer_classes``), so that string equality is answer equivalence; unextractable
  answers are :data:`~ttrl_lightning.answers.NO_ANSWER`. ``raw_answers`` are the answers as extracted;
* ``texts`` ``[J]`` (``None`` where not given), ``views`` ``[J]`` (one of the pool schema's ``VIEWS``);
* ``signals``: per-token signal name (``data.pool_schema.TOKEN_FIELDS``) -> :class:`TokenColumn`, a
  ``[J, T]`` float64 tensor of each vote's tokens, left-aligned, and ``lengths`` ``[J]`` (0: the vote has
  no such signal). Every value inside the lengths is finite: a NaN means the votes are corrupt, and a label
  built beside it is not to be trusted, so the group refuses it (:class:`PseudoLabelError` naming the vote,
  the signal and the token) whether the labeler reads that signal or not.

Two ways in, one check:

* ``rollouts.question_votes`` from pool-schema rollout dicts (what a pool file and a user's own code hold; the
  dicts are checked as :mod:`.rollouts` says, every error naming ``rollouts[j]`` and the field);
* :meth:`QuestionVotes.from_tensors` from an engine's ``[J, T]`` signal tensors and completion mask, with no
  per-token lists between the engine and the labeler (``TTRLModule`` builds its groups this way). The schema
  validation of a file stays at the file boundary (``data.pool_schema``).

Signals are float64 in both ways: an engine's float32 values widen exactly, so a label does not depend on
which way its votes came in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from ..answers import NO_ANSWER, canonical_answer_classes
from ..data.pool_schema import TOKEN_FIELDS, VIEWS
from .pseudo_label import PseudoLabelError

__all__ = ["TokenColumn", "QuestionVotes", "matches"]


@dataclass(frozen=True)
class TokenColumn:
    """One per-token signal of a question's ``J`` votes: ``values`` ``[J, T]`` float64, each vote's tokens
    left-aligned and 0 beyond ``lengths[j]``; ``lengths`` ``[J]`` int64 (0: vote ``j`` has no such signal)."""

    values: torch.Tensor
    lengths: torch.Tensor

    def row(self, j: int) -> torch.Tensor:
        """Vote ``j``'s ``lengths[j]`` values."""
        return self.values[j, :int(self.lengths[j])]

    def present(self) -> list[bool]:
        return (self.lengths > 0).tolist()


@dataclass(frozen=True)
class QuestionVotes:
    """One question's votes, column by column (see the module docstring)."""

    raw_answers: tuple[str, ...]
    texts: tuple[str | None, ...]
    views: tuple[str, ...]
    signals: Mapping[str, TokenColumn] = field(default_factory=dict)
    answers: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        n = len(self.raw_answers)
        if n == 0:
            raise PseudoLabelError("a vote group needs at least one vote")
        if len(self.texts) != n or len(self.views) != n:
            raise ValueError(f"{n} answers but {len(self.texts)} texts and {len(self.views)} views")
        bad_view = [v for v in self.views if v not in VIEWS]
        if bad_view:
            raise ValueError(f"views must be {VIEWS}, got {bad_view[0]!r}")
        for name, col in self.signals.items():
            if name not in TOKEN_FIELDS:
                raise ValueError(f"signal {name!r} is not a per-token field of the pool schema {TOKEN_FIELDS}")
            if col.values.dim() != 2 or col.values.shape[0] != n or col.lengths.shape != (n,):
                raise ValueError(f"signal {name!r} has values {tuple(col.values.shape)} and lengths "
                                 f"{tuple(col.lengths.shape)} for {n} votes")
            _check_finite(name, col)
        ids, reps = canonical_answer_classes(list(self.raw_answers))
        object.__setattr__(self, "answers", tuple(reps[c] for c in ids))

    def __len__(self) -> int:
        return len(self.raw_answers)

    @classmethod
    def from_tensors(cls, answers: Sequence[str], texts: Sequence[str | None], views: Sequence[str],
                     signals: Mapping[str, torch.Tensor], mask: torch.Tensor) -> "QuestionVotes":
        """A group from an engine's rows: ``signals`` name -> ``[J, L]`` values on the completion positions,
        ``mask`` ``[J, L]`` the positions that are the vote's own tokens (an agent's observations are not:
        they are dropped and the rest left-aligned, as a pool file stores them)."""
        mask = mask.bool().cpu()
        lengths = mask.sum(dim=1).to(torch.int64)
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # own tokens first, in order
        width = int(lengths.max()) if lengths.numel() else 0
        keep = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
        columns = {}
        for name, values in signals.items():
            packed = values.detach().cpu().to(torch.float64).gather(1, order)[:, :width]
            columns[name] = TokenColumn(torch.where(keep, packed, torch.zeros((), dtype=torch.float64)), lengths)
        return cls(tuple(answers), tuple(texts), tuple(views), columns)

    def has(self, name: str) -> list[bool]:
        """Per vote: whether it has per-token ``name``."""
        col = self.signals.get(name)
        return [False] * len(self) if col is None else col.present()

    def token_signal(self, j: int, name: str, method: str) -> torch.Tensor:
        """Vote ``j``'s per-token ``name`` (float64); missing: :class:`PseudoLabelError` naming the vote."""
        col = self.signals.get(name)
        if col is None or int(col.lengths[j]) == 0:
            raise PseudoLabelError(f"{method}: rollouts[{j}].{name} is missing; {method} needs per-token "
                                   f"{name!r} on every rollout")
        return col.row(j)

    def token_signals(self, name: str, method: str) -> list[torch.Tensor]:
        """Every vote's per-token ``name`` (:meth:`token_signal`)."""
        return [self.token_signal(j, name, method) for j in range(len(self))]

    def view_rows(self, view: str) -> list[int]:
        """The indices of the votes of ``view``, in order."""
        return [j for j, v in enumerate(self.views) if v == view]

    def classes_with(self, answer: str) -> tuple[list[str], str]:
        """The votes' canonical answers with ``answer`` (a gold answer) joining their classes:
        ``(answers [J], answer's representative)``, compared as the votes are compared with each other."""
        ids, reps = canonical_answer_classes([*self.raw_answers, answer])
        canon = [reps[c] for c in ids]
        return canon[:-1], canon[-1]


def _check_finite(name: str, col: TokenColumn) -> None:
    width = col.values.shape[1]
    inside = torch.arange(width).unsqueeze(0) < col.lengths.unsqueeze(1)
    bad = inside & ~torch.isfinite(col.values)
    if bool(bad.any()):
        j, k = (int(i) for i in torch.nonzero(bad)[0])
        v = float(col.values[j, k])
        raise PseudoLabelError(f"rollouts[{j}].{name} holds {'NaN' if v != v else v} at token {k}")


def matches(answers: Sequence[str], label: str | None) -> list[float]:
    """``1[answer == label]`` per vote over canonical answers; :data:`NO_ANSWER` and a ``None`` label never
    match."""
    if label is None or label == NO_ANSWER:
        return [0.0] * len(answers)
    return [1.0 if a == label else 0.0 for a in answers]

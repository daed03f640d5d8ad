"""Simple rewards for generated tasks (answers compared as strings after light normalisation).

Reward classes keep the exact ``RewardFn.__call__`` signature so configs can name them by ``class_path``."""
from __future__ import annotations

import re
from typing import Sequence

from ttrl_lightning.errors import UserError
from ttrl_lightning.rewards.base import REWARDS

_INT = re.compile(r"-?\d+")


def first_integer(text: str) -> str | None:
    """The first integer in ``text`` (``"19<eos>"`` -> ``"19"``), or None."""
    m = _INT.search(text)
    return m.group(0) if m else None


class ExactAnswer:
    """1.0 when the first integer of the completion equals the batch's ``gold`` answer (the column name is
    configurable), else 0.0; unextractable completions get 0."""

    def __init__(self, column: str = "gold"):
        self.column = column
        self.__name__ = f"exact_answer[{column}]"

    def __call__(self, *, prompts: list[str], completions: list[str], **columns) -> Sequence[float]:
        if self.column not in columns:
            hint = (" (the true answer's column is 'gold' everywhere; a batch or file that says 'answer' "
                    "predates the rename)" if "answer" in columns and self.column == "gold" else "")
            raise UserError(f"exact_answer needs the batch column {self.column!r}; got {sorted(columns)}{hint}")
        refs = columns[self.column]
        return [1.0 if (a := first_integer(c)) is not None and a == str(r).strip() else 0.0
                for c, r in zip(completions, refs)]


class DigitsOnly:
    """Format reward: the share of completion characters that are digits or '-' (0 for an empty one)."""

    __name__ = "digits_only"

    def __call__(self, *, prompts: list[str], completions: list[str], **columns) -> Sequence[float]:
        return [sum(ch.isdigit() or ch == "-" for ch in c) / len(c) if c else 0.0 for c in completions]


REWARDS.register("exact_answer", ExactAnswer)
REWARDS.register("digits_only", DigitsOnly)

"""Errors in what the user gave (files, options): the commands turn them into one line and exit code 1.

Every command of the ``ttrl`` CLI catches :class:`UserError` at its top level, prints
``ttrl <command>: <message>`` on stderr (no traceback unless debugging is asked for) and exits 1. Raise a
subclass of it wherever a user can fix the problem by changing an input: the message must then name what to
change (the file, the record - line or row and id - and the field, or the flag).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class UserError(ValueError):
    """An error in the user's input: the CLI prints its one-line message and exits 1, no traceback.

    A ``ValueError`` subclass, so library callers that catch ``ValueError`` keep working.
    """


def first_line(error: BaseException, limit: int | None = 200) -> str:
    """The first line of ``error``'s message (its type's name when it has none), cut at ``limit`` characters
    (None: uncut): how a library's multi-line error is quoted inside one line."""
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return line if limit is None else line[:limit]


def checked_list(values, name: str, item_type: type | tuple[type, ...], item_name: str, *,
                 error: type[Exception] | None = None, empty_hint: str = "") -> list:
    """``values`` as a non-empty list whose every item is an ``item_type`` (``item_name`` in messages): a
    string, bytes or a mapping is not such a list. Raises ``error`` when given (a labeler's one-line
    :class:`UserError`), else ``TypeError`` for a wrong type and ``ValueError`` for an empty list; every
    message names ``name`` or the item ``name[i]``."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise (error or TypeError)(f"{name} must be a list of {item_name}s, got {type(values).__name__}")
    out = list(values)
    if not out:
        raise (error or ValueError)(f"{name} is empty{empty_hint}")
    for i, item in enumerate(out):
        if not isinstance(item, item_type):
            raise (error or TypeError)(f"{name}[{i}] must be a {item_name}, got {type(item).__name__}")
    return out


@dataclass(frozen=True)
class Bounds:
    """The values a numeric argument may take: ``low`` and ``high`` (None: unbounded), each open or closed.

    ``integer``: whole numbers only; ``optional``: None is allowed too. Booleans, NaN and infinities are never
    in bounds. ``value in bounds`` tests a value, ``str(bounds)`` says the rule (``"in (0, 1]"``, ``">= 1"``).
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    optional: bool = False

    def __contains__(self, value: Any) -> bool:
        """Whether ``value`` is in bounds; never raises: an int of any size (a 400-digit ``min_share``) is
        compared exactly, never converted to a float (``OverflowError``)."""
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and (not math.isfinite(value) or (self.integer and not value.is_integer())):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        kind = "an integer " if self.integer else ""
        if self.low is not None and self.high is not None:
            rule = (f"{kind}in {'(' if self.low_open else '['}{self.low:g}, "
                    f"{self.high:g}{')' if self.high_open else ']'}")
        elif self.low is not None:
            rule = f"{kind}{'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            rule = f"{kind}{'<' if self.high_open else '<='} {self.high:g}"
        else:
            rule = "an integer" if self.integer else "a finite number"
        return rule + (" or null" if self.optional else "")


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a message, cut at ``limit`` characters; an int too long to print whole (Python
    refuses ``str`` of one of more than 4,300 digits) as its size in digits."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        return f"{'a negative' if value < 0 else 'an'} integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    try:
        text = repr(value)
    except ValueError:  # a container holding such an int
        return f"a {type(value).__name__} too large to print"
    return text if len(text) <= limit else text[:limit] + "..."


def check_bounds(values: Mapping[str, Any], rules: Mapping[str, Bounds], where: str) -> None:
    """Raise a :class:`~ttrl_lightning.errors.UserError` naming the first argument of ``values`` outside its
    ``rules`` entry: ``"<where><name> must be <rule>, got <value>"``."""
    for name, bounds in rules.items():
        if values[name] not in bounds:
            raise UserError(f"{where}{name} must be {bounds}, got {shown(values[name])}")

"""Errors in what the user gave (files, options): the commands turn them into one line and exit code 1.

Every command of the ``ttrl`` CLI catches :class:`UserError` at its top level, prints
``ttrl <command>: <message>`` on stderr (no traceback unless debugging is asked for) and exits 1. Raise a
subclass of it wherever a user can fix the problem by changing an input: the message must then name what to
change (the file, the record - line or row and id - and the field, or the flag).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence


class UserError(ValueError):
    """An error in the user's input: the CLI prints its one-line message and exits 1, no traceback.

    A ``ValueError`` subclass, so library callers that catch ``ValueError`` keep working.
    """


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

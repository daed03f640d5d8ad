"""Errors in what the user gave (files, options): the commands turn them into one line and exit code 1.

Every command of the ``ttrl`` CLI catches :class:`UserError` at its top level, prints
``ttrl <command>: <message>`` on stderr (no traceback unless debugging is asked for) and exits 1. Raise a
subclass of it wherever a user can fix the problem by changing an input: the message must then name what to
change (the file, the record - line or row and id - and the field, or the flag).
"""
from __future__ import annotations


class UserError(ValueError):
    """An error in the user's input: the CLI prints its one-line message and exits 1, no traceback.

    A ``ValueError`` subclass, so library callers that catch ``ValueError`` keep working.
    """

"""A bounded cost for answer comparison in every thread and process: a screen of the expression before any
symbolic work, and a wall-clock limit that also works off the main thread.

Model-written answers are arbitrary LaTeX. A few characters can ask sympy for unbounded work:
``10^{10^{10^{10}}}`` (a power tower), ``(x+1)^{100000}`` (a huge expansion), ``1000000!``, or about 25
nested ``\\frac``. Two defences, both needed:

* :func:`too_costly` reads the string once (linear) and names what it refuses: brace nesting deeper than
  ``MAX_DEPTH``, a power inside an exponent, an integer exponent above ``MAX_EXPONENT``, a factorial of
  an integer above ``MAX_FACTORIAL``, more than ``MAX_FRACS`` ``\\frac``. Such a comparison is undecidable
  here and counts as "not equal" (and in ``equivalence_stats()["screened"]``). The screen matters for work
  done inside one C call (big-integer powers), which no Python-level limit can interrupt.
* :func:`time_limit` stops the Python-level work (sympy, math-verify, mpmath are Python) after ``seconds``:
  a watchdog thread raises :class:`ComparisonTimeout` in the thread that runs the comparison
  (``PyThreadState_SetAsyncExc``), so it works in the main thread, a ``threading.Thread`` and a DataLoader
  worker alike (``signal.alarm``, which math-verify uses, works only in the main thread). The exception
  derives from ``BaseException`` so that sympy's ``except Exception`` does not swallow it, and it is raised
  again every ``REPEAT_S`` until the block is left.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import re
import threading
import time
from typing import Iterator

from .latex import matching_brace

__all__ = ["ComparisonTimeout", "time_limit", "too_costly"]

MAX_DEPTH = 12
MAX_EXPONENT = 10_000
MAX_FACTORIAL = 1_000
MAX_FRACS = 16
REPEAT_S = 0.05

_INT = re.compile(r"\d+")
_FACTORIAL = re.compile(r"(\d+)\s*!")


class ComparisonTimeout(BaseException):
    """Raised inside a :func:`time_limit` block whose time ran out (a ``BaseException``, like
    math-verify's own timeout, so that ``except Exception`` in sympy lets it through)."""


def _exponent(text: str, i: int) -> tuple[str, int]:
    """The exponent after the ``^`` at ``i - 1``: a braced group, a command (``\\pi``) or one character;
    returns it and the index after it."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if i < n and text[i] == "{":
        close = matching_brace(text, i)
        return (text[i + 1:close], close + 1) if close >= 0 else (text[i + 1:], n)
    if i < n and text[i] == "\\":
        j = i + 1
        while j < n and text[j].isalpha():
            j += 1
        return text[i:j], j
    m = _INT.match(text, i)
    if m:  # ``x^12``: LaTeX reads one digit, parsers often more; judge the whole run
        return m.group(), m.end()
    return text[i:i + 1], i + 1


def too_costly(text: str) -> str | None:
    """Why comparing ``text`` symbolically could take unbounded work, or None when it cannot."""
    depth = deepest = 0
    for ch in text:
        if ch in "{(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "})":
            depth = max(depth - 1, 0)
    if deepest > MAX_DEPTH:
        return f"nesting depth {deepest} > {MAX_DEPTH}"
    if text.count("\\frac") + text.count("\\dfrac") + text.count("\\tfrac") > MAX_FRACS:
        return f"more than {MAX_FRACS} fractions"
    for m in _FACTORIAL.finditer(text):
        if len(m.group(1)) > 6 or int(m.group(1)) > MAX_FACTORIAL:
            return f"factorial of {m.group(1)[:12]} > {MAX_FACTORIAL}"
    for m in re.finditer(r"\^|\*\*", text):
        exponent, end = _exponent(text, m.end())
        after = text[end:].lstrip()
        if "^" in exponent or "**" in exponent or "\\exp" in exponent or after.startswith(("^", "**")):
            return "a power inside an exponent"
        for number in _INT.findall(exponent):
            if len(number) > 6 or int(number) > MAX_EXPONENT:
                return f"exponent {number[:12]} > {MAX_EXPONENT}"
    return None


class _Watchdog:
    """One daemon thread that raises :class:`ComparisonTimeout` in threads whose deadline has passed."""

    def __init__(self):
        self._lock = threading.Condition()
        self._entries: dict[int, list] = {}  # token -> [thread id, deadline, fired]
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():  # also after a fork (DataLoader workers)
            self._thread = threading.Thread(target=self._run, name="answer-comparison-watchdog", daemon=True)
            self._thread.start()

    @staticmethod
    def _raise_in(thread_id: int, exc) -> None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                                   ctypes.py_object(exc) if exc is not None else None)

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                wake = None
                for entry in self._entries.values():
                    if now >= entry[1]:
                        self._raise_in(entry[0], ComparisonTimeout)
                        entry[2] = True
                        entry[1] = now + REPEAT_S  # again, should something swallow it
                    wake = entry[1] if wake is None else min(wake, entry[1])
                self._lock.wait(None if wake is None else max(wake - time.monotonic(), 0.0))

    def enter(self, seconds: float) -> int:
        with self._lock:
            self._start()
            token = next(self._tokens)
            self._entries[token] = [threading.get_ident(), time.monotonic() + seconds, False]
            self._lock.notify()
            return token

    def leave(self, token: int) -> bool:
        """Unregister; True when the limit fired. A fired exception still pending is cleared."""
        with self._lock:
            entry = self._entries.pop(token)
            if entry[2]:
                self._raise_in(entry[0], None)
            return entry[2]


_WATCHDOG = _Watchdog()


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`ComparisonTimeout` in this thread when the block runs longer than ``seconds``. The
    exception can surface as the block is left, so catch it around the ``with``."""
    token = _WATCHDOG.enter(seconds)
    try:
        yield
    finally:  # a block that finished as the limit fired keeps its result; a pending raise is cleared
        _WATCHDOG.leave(token)


def _reset_after_fork() -> None:
    global _WATCHDOG
    _WATCHDOG = _Watchdog()  # the parent's thread and lock state do not survive a fork


os.register_at_fork(after_in_child=_reset_after_fork)

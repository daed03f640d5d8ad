"""A bounded cost for answer comparison in every thread and process: a screen of the expression before any
symbolic work, and a wall-clock limit that also works off the main thread.

Model-written answers are arbitrary LaTeX. A few characters can ask sympy for unbounded work:
``10^{10^{10^{10}}}`` (a power tower), ``(x+1)^{100000}`` (a huge expansion), ``1000000!``, or about 25
nested ``\\frac``. Two defences, both needed:

* :func:`too_costly` reads the string (linear, on answers of at most a few hundred characters) and names what
  it refuses: brace nesting deeper than ``MAX_DEPTH``, a power inside an exponent, an integer exponent above
  ``MAX_EXPONENT``, a factorial or Gamma of more than ``MAX_FACTORIAL`` (or of a power), a sum or product of
  more than ``MAX_TERMS`` terms or whose terms times its largest exponent exceed ``MAX_TERM_WORK``, a binomial
  of more than ``MAX_BINOMIAL`` (or of a power), more than ``MAX_FRACS`` ``\\frac``. Such a comparison is
  undecidable here and counts as "not equal" (and in ``equivalence_stats()["screened"]``). The screen spares
  the worker process (``symbolic_worker``) a kill and a restart for work inside one C call (big-integer
  arithmetic), which no Python-level limit can interrupt; the kill is the bound for what the screen misses.
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
MAX_TERMS = 1_000
MAX_TERM_WORK = 20_000
MAX_BINOMIAL = 100_000
REPEAT_S = 0.05

_INT = re.compile(r"\d+")
_FACTORIAL = re.compile(r"(\d+)\s*!")
# answers reach the screen normalised (casefolded): ``\Gamma`` reads ``\gamma``
_BIG_SUM = re.compile(r"\\(?:prod|sum)(?![a-z])", re.IGNORECASE)
_BINOMIAL = re.compile(r"\\[dt]?binom(?![a-z])", re.IGNORECASE)
_GAMMA = re.compile(r"\\gamma(?![a-z])", re.IGNORECASE)


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


def _group_after(text: str, i: int) -> tuple[str, int]:
    """The ``{...}`` or ``(...)`` group starting at ``i`` (spaces skipped), or one token; and the index after."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if i < n and text[i] == "(":
        depth = 0
        for j in range(i, n):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1:j], j + 1
        return text[i + 1:], n
    return _exponent(text, i)


def _group_before(text: str, end: int) -> str:
    """The ``{...}`` or ``(...)`` group ending just before ``end`` (its closing bracket at ``end - 1``)."""
    close = text[end - 1]
    opening = {")": "(", "}": "{"}[close]
    depth = 0
    for j in range(end - 1, -1, -1):
        depth += {close: 1, opening: -1}.get(text[j], 0)
        if depth == 0:
            return text[j + 1:end - 1]
    return text[:end - 1]


def _largest_int(text: str) -> int:
    """The largest integer written in ``text`` (digits beyond 7 count as 10**7), 0 when there is none."""
    return max((10 ** 7 if len(m) > 7 else int(m) for m in _INT.findall(text)), default=0)


def _big_operators(text: str) -> str | None:
    """Sums and products, binomials and Gamma whose arguments ask for unbounded big-integer work."""
    for m in _BIG_SUM.finditer(text):
        i, limits = m.end(), ""
        for _ in range(3):  # ``\limits``, ``_{..}``, ``^{..}`` in any order
            rest = text[i:].lstrip()
            i = len(text) - len(rest)
            if rest.startswith(("\\limits", "\\nolimits")):
                i += rest.index("limits") + 6
            elif rest[:1] in ("_", "^"):
                group, i = _exponent(text, i + 1)
                limits += " " + group
        terms = _largest_int(limits)
        if terms > MAX_TERMS or "^" in limits or "!" in limits:
            return f"a sum or product over {min(terms, 10 ** 7)}+ terms > {MAX_TERMS}"
        exponents = [_largest_int(_exponent(text, i + e.end())[0]) for e in re.finditer(r"\^", text[i:])]
        if terms * max(exponents, default=1) > MAX_TERM_WORK:
            return f"a sum or product of {terms} terms x exponent {max(exponents)} > {MAX_TERM_WORK}"
    for m in _BINOMIAL.finditer(text):
        top, i = _group_after(text, m.end())
        bottom, _ = _group_after(text, i)
        if _largest_int(top + " " + bottom) > MAX_BINOMIAL or any(c in top + bottom for c in "^!"):
            return f"a binomial of more than {MAX_BINOMIAL}"
    if "\\choose" in text and (_largest_int(text) > MAX_BINOMIAL or "^" in text):
        return f"a binomial of more than {MAX_BINOMIAL}"
    for m in _GAMMA.finditer(text):
        argument, _ = _group_after(text, m.end())
        if _largest_int(argument) > MAX_FACTORIAL or any(c in argument for c in "^!"):
            return f"a Gamma of more than {MAX_FACTORIAL}"
    for m in re.finditer(r"[)}]\s*!", text):
        argument = _group_before(text, m.start() + 1)
        if _largest_int(argument) > MAX_FACTORIAL or any(c in argument for c in "^!"):
            return f"a factorial of more than {MAX_FACTORIAL}"
    return None


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
        if "!" in exponent or re.search(r"\\(?:gamma|binom|prod)", exponent, re.IGNORECASE):
            return "a factorial, Gamma, binomial or product inside an exponent"
        for number in _INT.findall(exponent):
            if len(number) > 6 or int(number) > MAX_EXPONENT:
                return f"exponent {number[:12]} > {MAX_EXPONENT}"
    return _big_operators(text)


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

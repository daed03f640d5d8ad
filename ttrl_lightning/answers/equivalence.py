"""Answer equivalence: are two extracted answers the same answer? (VisConf appendix A, "normalization").

:func:`answers_equal`: normalised-string fast path, exact plain numbers, then numeric / LaTeX equivalence
through ``math_verify`` (``0.5 == \\frac{1}{2} == 1/2``, ``x=3 == 3``, ``10^{2} == 100``).
:data:`~.label.NO_ANSWER` never equals anything, itself included.

Percentages follow ``math_verify``: ``50\\%`` equals both ``0.5`` (its value) and ``50`` (the usual
grading convention of answering a "what percent" question with the bare number). This makes equality
non-transitive (``0.5 != 50``); :func:`~.classes.canonical_answer_classes` states how classes are formed
anyway.
"""
from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections import OrderedDict
from fractions import Fraction
from functools import lru_cache
from typing import Iterator

from .budget import ComparisonTimeout, too_costly
from .label import NO_ANSWER
from .latex import strip_math_delimiters, unwrap_text_macros
from .symbolic import compare_pair, far_apart
from .symbolic_worker import KILL_GRACE_S, STARTUP_TIMEOUT_S, WorkerUnavailable, default_pool

logger = logging.getLogger(__name__)

__all__ = ["answers_equal", "equivalence_stats", "labelling_budget", "clear_caches"]

_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|~|\\left|\\right|\\displaystyle")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_MATH_WORDS = re.compile(r"sin|cos|tan|cot|sec|csc|log|ln|exp|sqrt|pi|inf|infty|deg|mod|frac|dfrac")
_MAX_MATH_CHARS = 300

#: wall-clock budget of one symbolic comparison (parse, evaluation and verify of both answers), any thread; its
#: worker is killed ``symbolic_worker.KILL_GRACE_S`` later if it has not answered
COMPARISON_BUDGET_S = 2.0
#: wall-clock budget of the symbolic work of one labelling call (``canonical_answer_classes``): past it, the
#: call's remaining comparisons are decided by the cheap rules alone (counted in ``starved``)
LABELLING_BUDGET_S = 20.0

_STATS = {"math_verify_calls": 0, "parse_failures": 0, "verify_failures": 0, "verify_calls": 0, "screened": 0,
          "timeouts": 0, "killed": 0, "starved": 0}
_CACHE_SIZE = 262144


def equivalence_stats() -> dict[str, int]:
    """Counters since import (per process; the worker's symbolic work included): math-verify parses, verify
    calls, caught parse / verify failures, and the undecidable comparisons counted as "not equal":
    ``screened`` (refused by ``budget.too_costly`` or by their length before any symbolic work), ``timeouts``
    (no decision within ``COMPARISON_BUDGET_S``; ``killed`` of them needed the worker killed), ``starved``
    (left to the cheap rules because the labelling call's ``LABELLING_BUDGET_S`` was spent)."""
    return dict(_STATS)


class _BoundedDict(OrderedDict):
    """A least-recently-set cache of at most ``_CACHE_SIZE`` entries."""

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        if len(self) > _CACHE_SIZE:
            self.popitem(last=False)


#: symbolic decisions per (sorted) pair of normalised answers: True, False, or None (undecided: counted as
#: different); and the normalised answers that are undecidable against anything (their own parse ran out)
_DECISIONS: _BoundedDict = _BoundedDict()
_UNDECIDABLE: _BoundedDict = _BoundedDict()
_CACHE_LOCK = threading.Lock()
_BUDGETS = threading.local()


@contextlib.contextmanager
def labelling_budget(seconds: float) -> Iterator[None]:
    """Bound the symbolic work of the comparisons made inside the block, in this thread, to ``seconds`` in all
    (nested blocks keep the tighter bound). Comparisons past it use the cheap rules alone (``starved``)."""
    stack = getattr(_BUDGETS, "deadlines", None)
    if stack is None:
        stack = _BUDGETS.deadlines = []
    deadline = time.monotonic() + seconds
    stack.append(min([deadline] + stack[-1:]))
    try:
        yield
    finally:
        stack.pop()


def _budget_left() -> float:
    stack = getattr(_BUDGETS, "deadlines", None)
    return max(stack[-1] - time.monotonic(), 0.0) if stack else float("inf")


def clear_caches() -> None:
    """Forget every cached decision of this process (its workers keep their parse caches, which hold values,
    not decisions)."""
    with _CACHE_LOCK:
        _DECISIONS.clear()
        _UNDECIDABLE.clear()
    _normalised.cache_clear()


@lru_cache(maxsize=65536)
def _normalised(s: str) -> str:
    """Cheap canonical string: delimiters, text macros, spacing and whitespace removed, casefolded."""
    s = strip_math_delimiters(s)
    s = unwrap_text_macros(s)
    s = _SPACING.sub("", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = "".join(s.split()).rstrip(".")
    return s.casefold()


def _looks_mathematical(norm: str) -> bool:
    """False for prose, so that math-verify never reads words as products of symbols.

    Outside LaTeX commands and function names (sin, log, pi, ...), a run of three or more letters is prose
    ("less than 30%", "new york"); a two-letter run is prose unless the answer has a math sign (digit,
    operator, bracket, ``^``, ``_``, ``\\``): "no" / "on" are words, "3xy^2" is math.
    """
    if not norm or len(norm) > _MAX_MATH_CHARS:
        return False
    rest = _LATEX_CMD.sub(" ", norm)
    rest = _MATH_WORDS.sub(" ", rest)
    if re.search(r"[a-z]{3,}", rest):
        return False
    return not (re.search(r"[a-z]{2}", rest) and not re.search(r"[\d\\^_=+\-*/()\[\]{}]", norm))


# linear-time patterns: each digit run can be read one way only (``\d+\.?\d*`` and ``\d*[1-9]\d*`` backtrack
# quadratically on a long run of digits that fails at its end)
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:/0*[1-9]\d*)?")
_PLAIN_FRAC = re.compile(r"([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?0*[1-9]\d*)\}")


#: digits above which a plain number is not converted to an int (Python refuses str -> int past 4,300 digits)
LONG_NUMBER_DIGITS = 4000


def _long_plain_numbers_equal(na: str, nb: str) -> bool | None:
    """Whether two normalised answers are equal when either holds more digits than can be converted to an
    int (``LONG_NUMBER_DIGITS``): two plain decimals are equal exactly when their canonical digit strings are
    (sign, leading zeros of the integer part, trailing zeros of the fraction dropped); any other pair with
    such a string (a fraction, an expression) is screened and counted as different. None: neither is long."""
    def digits(s: str) -> int:
        return sum(c.isdigit() for c in s)

    long = [s for s in (na, nb) if digits(s) > LONG_NUMBER_DIGITS]
    if not long:
        return None
    if not all(_PLAIN_NUMBER.fullmatch(s) and "/" not in s for s in (na, nb)):
        _STATS["screened"] += 1
        return False

    def canonical(s: str) -> str:
        sign = "-" if s.startswith("-") else ""
        whole, _, frac = s.lstrip("+-").partition(".")
        whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
        body = whole + ("." + frac if frac else "")
        return ("" if body == "0" else sign) + body

    return canonical(na) == canonical(nb)


def _plain_number(norm: str) -> Fraction | None:
    """Exact value of a plain number ("-2", "0.75", ".5", "3/4", "\\frac{3}{4}"; normalised), else None."""
    if _PLAIN_NUMBER.fullmatch(norm):
        return Fraction(norm)
    m = _PLAIN_FRAC.fullmatch(norm)
    if m:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return -value if m.group(1) == "-" else value
    return None


def _equal_cached(a: str, b: str) -> bool:
    na, nb = _normalised(a), _normalised(b)
    if na == nb:
        return bool(na)
    if re.fullmatch(r"[a-z]", na) or re.fullmatch(r"[a-z]", nb):
        return False  # an option letter / lone symbol equals only itself (case aside)
    long = _long_plain_numbers_equal(na, nb)
    if long is not None:
        return long
    fa, fb = _plain_number(na), _plain_number(nb)
    if fa is not None and fb is not None:
        if fa == fb:
            return True
        if (fa.denominator == fb.denominator == 1 and "." not in na + nb) or far_apart(fa, fb):
            return False  # different integers, or clearly different numbers
    if not (_looks_mathematical(na) and _looks_mathematical(nb)):
        return False
    return _symbolic_equal(a, b, na, nb)


def _symbolic_equal(a: str, b: str, na: str, nb: str) -> bool:
    """The symbolic rules for two math-looking answers: the screen, then :func:`.symbolic.compare_pair` in a
    worker process under ``COMPARISON_BUDGET_S`` (and the labelling call's budget); every decision, undecided
    included, is cached per pair of normalised answers."""
    key = (na, nb) if na <= nb else (nb, na)
    with _CACHE_LOCK:
        if key in _DECISIONS:
            return bool(_DECISIONS[key])
        if na in _UNDECIDABLE or nb in _UNDECIDABLE:
            return False
    for norm, raw in ((na, a), (nb, b)):
        reason = too_costly(norm)
        if reason is not None:  # a property of the answer alone: undecidable against any other
            _STATS["screened"] += 1
            logger.warning("answer %r not compared symbolically (%s): counted as different from any other",
                           raw[:60], reason)
            with _CACHE_LOCK:
                _UNDECIDABLE.put(norm, None)
            return False
    budget = min(COMPARISON_BUDGET_S, _budget_left())  # read at call time (tests shorten them)
    if budget <= 0.0:
        _STATS["starved"] += 1
        stack = _BUDGETS.deadlines
        if getattr(_BUDGETS, "warned", None) != stack[-1]:
            _BUDGETS.warned = stack[-1]
            logger.warning("this labelling call's symbolic budget is spent: its remaining comparisons (from %r "
                           "and %r on) use the cheap rules alone, unequal unless equal as strings or numbers",
                           a[:60], b[:60])
        return False  # not cached: another call may have the time
    decision, culprit = _compare_in_worker(a, b, budget)
    if decision == "timeout":
        _STATS["timeouts"] += 1
        logger.warning("comparing %r and %r took over %g s: counted as different", a[:60], b[:60], budget)
        if budget < COMPARISON_BUDGET_S:
            return False  # cut short by the labelling call's budget: not a property of the pair, not cached
    with _CACHE_LOCK:
        if culprit is not None:
            _UNDECIDABLE.put(na if culprit == "a" else nb, None)
        _DECISIONS.put(key, {"equal": True, "different": False}.get(decision))
    return decision == "equal"


_IN_PROCESS_WARNED = False


def _compare_in_worker(a: str, b: str, budget: float) -> tuple[str, str | None]:
    """``compare_pair`` in the worker pool, killed ``KILL_GRACE_S`` past ``budget``; in this process (soft limit
    only) when no worker can be started, with one warning."""
    global _IN_PROCESS_WARNED
    try:
        answered, value = default_pool().call((a, b, budget), budget + KILL_GRACE_S)
    except WorkerUnavailable as err:
        if not _IN_PROCESS_WARNED:
            _IN_PROCESS_WARNED = True
            logger.warning("%s; comparing answers in this process, where work inside one C call is not bounded", err)
            # import and warm math-verify and sympy outside any comparison's budget, as a worker does before it
            # says ready: the first import alone can take the whole budget on a busy machine
            compare_pair("1/2", "0.5", STARTUP_TIMEOUT_S)
        try:
            decision, culprit, stats = compare_pair(a, b, budget)
        except ComparisonTimeout:  # surfaced as the block was left
            decision, culprit, stats = "timeout", None, {}
        answered, value = True, (decision, culprit, stats)
    if not answered:
        _STATS["killed"] += 1
        return "timeout", None
    decision, culprit, stats = value
    for name, count in stats.items():
        _STATS[name] = _STATS.get(name, 0) + count
    return decision, culprit


def answers_equal(a: str, b: str) -> bool:
    """Whether two extracted answers are the same answer.

    Rules, in order:
      * :data:`NO_ANSWER` never equals anything, itself included: two unextractable responses are not
        evidence of the same answer when scoring correctness (voting groups them separately, see
        :func:`canonical_answer_classes`).
      * equal after cheap normalisation (``$``, ``\\text{}``, spacing commands, whitespace, trailing full
        stop, ``\\dfrac`` -> ``\\frac``, case-insensitive, so option letters "b" == "B");
      * a single letter equals only itself; two plain integers compare exactly; plain numbers
        ("0.75", "3/4", "\\frac{3}{4}") that are exactly equal are equal, clearly apart are different;
      * prose (a run of three or more letters that is not a LaTeX command or a known function name, or of
        two letters without any math sign) compares by the normalised string only, so "less than 30%" or
        "no" are never parsed as products of symbols;
      * two finite real constants further apart than ``max(1e-6, 1e-9 * magnitude)`` are different (a
        negative fast path; math-verify could not equate them either; percentages excluded);
      * otherwise ``math_verify.verify`` on ``math_verify.parse`` of both (either direction):
        ``0.5 == \\frac{1}{2} == 1/2``, ``\\dfrac{3}{4} == 0.75``, ``x=3 == 3``, ``10^{2} == 100``,
        ``50\\% == 0.5`` and ``50\\% == 50`` (math-verify's percentage rule), floats rounded to 6 places;
      * bounded: an answer whose symbolic work could be unbounded (a power tower, a huge exponent, factorial,
        product, sum, binomial or Gamma, deep nesting: ``budget.too_costly``) and a comparison with no decision
        after ``COMPARISON_BUDGET_S`` seconds count as different, and in :func:`equivalence_stats`. The symbolic
        work runs in a worker process (:mod:`.symbolic_worker`) that is killed when it overruns, so the bound
        holds for work inside one C call too, in any thread, and Ctrl-C is honoured at once.
    Symbolic decisions, undecided ones included, are cached per (unordered) pair of normalised answers; an
    answer whose own parse ran out of time is undecidable against any other.

    Raises:
        TypeError: an argument is not a ``str``.
    """
    if not isinstance(a, str) or not isinstance(b, str):
        raise TypeError(f"answers_equal expects two str, got {type(a).__name__} and {type(b).__name__}")
    if a == NO_ANSWER or b == NO_ANSWER:
        return False
    if a == b:
        return bool(a.strip())
    return _equal_cached(*sorted((a, b)))

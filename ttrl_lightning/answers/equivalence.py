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

import logging
import re
from fractions import Fraction
from functools import lru_cache

from .budget import ComparisonTimeout, time_limit, too_costly
from .label import NO_ANSWER
from .latex import strip_math_delimiters, unwrap_text_macros

logger = logging.getLogger(__name__)

__all__ = ["answers_equal", "equivalence_stats"]

_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|~|\\left|\\right|\\displaystyle")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_MATH_WORDS = re.compile(r"sin|cos|tan|cot|sec|csc|log|ln|exp|sqrt|pi|inf|infty|deg|mod|frac|dfrac")
_MAX_MATH_CHARS = 300

def _drop_timeout_notice(record: logging.LogRecord) -> bool:
    # math-verify warns once that its own timeouts are off; ``budget.time_limit`` bounds every call instead
    return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_drop_timeout_notice)

#: wall-clock budget of one symbolic comparison (parse, evaluation and verify of both answers), any thread
COMPARISON_BUDGET_S = 2.0

_STATS = {"math_verify_calls": 0, "parse_failures": 0, "verify_failures": 0, "screened": 0, "timeouts": 0}


def equivalence_stats() -> dict[str, int]:
    """Counters since import (per process): math-verify calls, caught parse / verify failures, and the
    undecidable comparisons counted as "not equal": ``screened`` (refused by ``budget.too_costly`` before any
    symbolic work) and ``timeouts`` (stopped after ``COMPARISON_BUDGET_S``)."""
    return dict(_STATS)


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


@lru_cache(maxsize=65536)
def _parse_math(s: str):
    """``math_verify.parse`` of one answer (wrapped in ``$..$``), or None when nothing symbolic came out.

    Only math-verify's own failures are caught: the LaTeX parser raises plain ``Exception`` on
    malformed input; it is counted in :func:`equivalence_stats` and logged, and the answer then compares
    by string only. Time is bounded by the caller (``budget.time_limit``; math-verify's own ``signal.alarm``
    timeouts are off, as they work in the main thread only).
    """
    import sympy
    from math_verify import parse

    _STATS["math_verify_calls"] += 1
    body = strip_math_delimiters(s)
    try:
        parsed = parse("$" + body + "$", parsing_timeout=None, raise_on_error=True)
    except Exception as err:  # noqa: BLE001 - latex2sympy raises bare Exception
        _STATS["parse_failures"] += 1
        logger.debug("math_verify could not parse %r: %s: %s", s[:80], type(err).__name__, err)
        return None
    exprs = [p for p in parsed if isinstance(p, (sympy.Basic, sympy.MatrixBase))]
    return parsed if exprs else None


@lru_cache(maxsize=65536)
def _finite_value(s: str):
    """30-digit sympy Float of a finite real constant ("\\sqrt{7}", "2^{100}", "x = 3"), else None."""
    import sympy

    parsed = _parse_math(s)
    if parsed is None:
        return None
    expr = next(p for p in parsed if isinstance(p, (sympy.Basic, sympy.MatrixBase)))
    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        expr = expr.rhs  # "x = 3": math-verify compares the assigned value
    if not isinstance(expr, sympy.Expr) or expr.free_symbols or not expr.is_number:
        return None
    try:
        value = expr.evalf(30)
    except (TypeError, ValueError, ArithmeticError) as err:  # sympy's evaluation errors
        logger.debug("could not evaluate %r: %s: %s", s[:80], type(err).__name__, err)
        return None
    return value if value.is_real and value.is_finite else None


def _clearly_different_numbers(a: str, b: str) -> bool:
    """Both are finite real constants that math-verify cannot call equal (a cheap negative fast path).

    math-verify equates numbers only when equal after rounding to 6 decimals or exactly (15 digits), and
    for percentages (excluded here). Values further apart than max(1e-6, 1e-9 * magnitude) are different,
    which spares its symbolic comparison (up to a few hundred ms for e.g. sqrt(7) vs 12).
    """
    if "%" in a or "%" in b:
        return False
    va, vb = _finite_value(a), _finite_value(b)
    return va is not None and vb is not None and _far_apart(va, vb)


def _verify(pa, pb) -> bool:
    from math_verify import verify

    try:
        return bool(verify(pa, pb, timeout_seconds=None, raise_on_error=True)
                    or verify(pb, pa, timeout_seconds=None, raise_on_error=True))
    except Exception as err:  # noqa: BLE001 - sympy raises a zoo of types here
        _STATS["verify_failures"] += 1
        logger.debug("math_verify could not compare: %s: %s", type(err).__name__, err)
        return False


_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:/\d*[1-9]\d*)?")
_PLAIN_FRAC = re.compile(r"([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d*[1-9]\d*)\}")


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


def _far_apart(va, vb) -> bool:
    """|va - vb| > max(1e-6, 1e-9 * magnitude): math-verify cannot call such numbers equal.

    (It equates numbers only when equal after rounding to 6 decimals, or exactly to 15 digits, or by its
    percentage rule, which callers exclude.)
    """
    gap = abs(va - vb)
    return bool(gap > 1e-6 and gap > 1e-9 * max(abs(va), abs(vb)))


@lru_cache(maxsize=262144)
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
        if (fa.denominator == fb.denominator == 1 and "." not in na + nb) or _far_apart(fa, fb):
            return False  # different integers, or clearly different numbers
    if not (_looks_mathematical(na) and _looks_mathematical(nb)):
        return False
    reason = too_costly(na) or too_costly(nb)
    if reason is not None:
        _STATS["screened"] += 1
        logger.warning("answers %r and %r not compared symbolically (%s): counted as different", a[:60], b[:60],
                       reason)
        return False
    try:
        with time_limit(COMPARISON_BUDGET_S):
            pa, pb = _parse_math(a), _parse_math(b)
            if pa is None or pb is None or _clearly_different_numbers(a, b):
                return False
            return _verify(pa, pb)
    except ComparisonTimeout:
        _STATS["timeouts"] += 1
        logger.warning("comparing %r and %r took over %g s: counted as different", a[:60], b[:60],
                       COMPARISON_BUDGET_S)
        return False


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
      * bounded: an answer whose symbolic work could be unbounded (a power tower, a huge exponent or
        factorial, deep nesting: ``budget.too_costly``) and a comparison still running after
        ``COMPARISON_BUDGET_S`` seconds (in any thread: ``budget.time_limit``) count as different, and in
        :func:`equivalence_stats`.
    Results are memoised on the (unordered) pair; parses are memoised per string.

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

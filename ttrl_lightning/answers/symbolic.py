"""The symbolic half of answer equivalence: math-verify's parse and verify of two answers (VisConf appendix A,
"normalization"), run inside a :mod:`.symbolic_worker` process so that a stuck comparison can be killed.

:func:`compare_pair` is the whole decision for one pair: parse each answer (``math_verify.parse``), a cheap
negative fast path for two clearly different constants, then ``math_verify.verify`` in either direction. Its
Python-level work stops at the budget (``budget.time_limit``, a soft limit); work inside one C call (big-integer
arithmetic) does not, and is what the worker's hard limit, a kill, is for.
"""
from __future__ import annotations

import logging
import re
from functools import lru_cache

from .budget import ComparisonTimeout, time_limit
from .latex import strip_math_delimiters

logger = logging.getLogger(__name__)

__all__ = ["compare_pair", "far_apart"]

#: counters of the symbolic work in this process; :func:`compare_pair` returns what one call added
STATS = {"math_verify_calls": 0, "parse_failures": 0, "verify_failures": 0, "verify_calls": 0}


def _drop_timeout_notice(record: logging.LogRecord) -> bool:
    # math-verify warns once that its own timeouts are off; the budget and the worker's kill bound every call
    return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_drop_timeout_notice)


def far_apart(va, vb) -> bool:
    """|va - vb| > max(1e-6, 1e-9 * magnitude): math-verify cannot call such numbers equal.

    (It equates numbers only when equal after rounding to 6 decimals, or exactly to 15 digits, or by its
    percentage rule, which callers exclude.)
    """
    gap = abs(va - vb)
    return bool(gap > 1e-6 and gap > 1e-9 * max(abs(va), abs(vb)))


@lru_cache(maxsize=65536)
def _parse_math(s: str):
    """``math_verify.parse`` of one answer (wrapped in ``$..$``), or None when nothing symbolic came out.

    Only math-verify's own failures are caught: the LaTeX parser raises plain ``Exception`` on
    malformed input; it is counted and logged, and the answer then compares by string only. (math-verify's own
    ``signal.alarm`` timeouts are off: they work in the main thread only.)
    """
    import sympy
    from math_verify import parse

    STATS["math_verify_calls"] += 1
    body = strip_math_delimiters(s)
    try:
        parsed = parse("$" + body + "$", parsing_timeout=None, raise_on_error=True)
    except Exception as err:  # noqa: BLE001 - latex2sympy raises bare Exception
        STATS["parse_failures"] += 1
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


def _verify(pa, pb) -> bool:
    from math_verify import verify

    STATS["verify_calls"] += 1
    try:
        return bool(verify(pa, pb, timeout_seconds=None, raise_on_error=True)
                    or verify(pb, pa, timeout_seconds=None, raise_on_error=True))
    except Exception as err:  # noqa: BLE001 - sympy raises a zoo of types here
        STATS["verify_failures"] += 1
        logger.debug("math_verify could not compare: %s: %s", type(err).__name__, err)
        return False


#: LaTeX operators whose subscript binds an index (``\\prod_{k=1}^{3}``): math-verify reads them as operators
_BIG_OPERATORS = {"prod", "sum", "coprod", "bigcup", "bigcap", "bigoplus", "bigotimes", "bigvee", "bigwedge",
                  "lim", "int", "oint", "max", "min", "sup", "inf", "limsup", "liminf"}
_ASSIGNING_SUBSCRIPT = re.compile(r"_\{[^{}]*=")
_COMMAND_BEFORE = re.compile(r"\\([A-Za-z]+)\s*$")


def subscript_assignment(text: str) -> bool:
    """Whether ``text`` holds a subscript with ``=`` on anything but a big operator (``\\Pi_{k=1}^{3} k``,
    ``x_{k=1}``, ``f_{n=5}``): math-verify reads such a subscript as an assignment and the whole answer as the
    assigned value (``\\Pi_{k=1}^{3} k`` "equals" 1), so such an answer is compared as text only."""
    for m in _ASSIGNING_SUBSCRIPT.finditer(text):
        before = _COMMAND_BEFORE.search(text[:m.start()])
        if before is None or before.group(1) not in _BIG_OPERATORS:
            return True
    return False


def compare_pair(a: str, b: str, budget_s: float) -> tuple[str, str | None, dict[str, int]]:
    """Decide whether two answers are equal symbolically within ``budget_s`` seconds of Python-level work.

    Stages: parse ``a`` (and its value, if a finite constant), the same for ``b``, then either the negative fast
    path (two finite real constants further apart than :func:`far_apart`; percentages excluded, as math-verify
    has its own rule for them) or ``math_verify.verify`` in either direction.

    Returns:
        ``(decision, culprit, stats)``: ``decision`` is ``"equal"``, ``"different"`` or ``"timeout"``;
        ``culprit`` is ``"a"`` or ``"b"`` when the time ran out on that answer alone (its parse or evaluation:
        it is undecidable against anything), else None; ``stats`` what this call added to :data:`STATS`.
    """
    before = dict(STATS)
    if subscript_assignment(a) or subscript_assignment(b):  # math-verify would read the subscript as the value
        return "different", None, {k: 0 for k in STATS}
    stage: str | None = "a"
    try:
        with time_limit(budget_s):
            pa = _parse_math(a)
            va = _finite_value(a) if pa is not None else None
            stage = "b"
            pb = _parse_math(b)
            vb = _finite_value(b) if pb is not None else None
            stage = None
            if pa is None or pb is None:
                equal = False
            elif "%" not in a + b and va is not None and vb is not None and far_apart(va, vb):
                equal = False
            else:
                equal = _verify(pa, pb)
        decision = "equal" if equal else "different"
    except ComparisonTimeout:
        decision = "timeout"
    return decision, stage if decision == "timeout" else None, {k: STATS[k] - before[k] for k in STATS}


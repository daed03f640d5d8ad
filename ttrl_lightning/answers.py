"""Answer extraction and answer equivalence (VisConf appendix A, "Answer extraction and normalization").

Three public functions and one shared label:

* :func:`extract_answer` -- the final answer of one response: the last well-formed ``\\boxed{...}``
  (or ``\\fbox{...}``), multiple-choice answers canonicalised to the upper-case option letter, boxed option
  text matched to its letter, then conservative final-line / final-sentence fallbacks
  ("The answer is X", "Answer: X", "Final answer: X"); :data:`NO_ANSWER` when nothing is found.
* :func:`answers_equal` -- are two extracted answers the same answer? Normalised-string fast path, then
  numeric / LaTeX equivalence through ``math_verify`` (``0.5 == \\frac{1}{2} == 1/2``, ``x=3 == 3``,
  ``10^{2} == 100``). :data:`NO_ANSWER` never equals anything, itself included.
* :func:`canonical_answer_classes` -- group one question's answers into equivalence classes for voting;
  here all :data:`NO_ANSWER` strings share one class (VisConf votes them as one shared label).

Percentages follow ``math_verify``: ``50\\%`` equals both ``0.5`` (its value) and ``50`` (the usual
grading convention of answering a "what percent" question with the bare number). This makes equality
non-transitive (``0.5 != 50``); :func:`canonical_answer_classes` states how classes are formed anyway.
"""
from __future__ import annotations

import logging
import re
import string
import threading
from fractions import Fraction
from functools import lru_cache
from typing import Mapping, Sequence

logger = logging.getLogger(__name__)

NO_ANSWER = "<NO_ANSWER>"
"""Shared label of an unextractable response (VisConf appendix A)."""

__all__ = [
    "NO_ANSWER",
    "extract_answer",
    "answers_equal",
    "canonical_answer_classes",
    "equivalence_stats",
]

# ----------------------------------------------------------------------------------------------------------
# Brace-aware scanning
# ----------------------------------------------------------------------------------------------------------
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_WRAPPERS = ("text", "textbf", "textit", "textrm", "mathrm", "mathbf", "mathit", "mbox", "operatorname")
_WRAPPER_OPEN = re.compile(r"\\(?:" + "|".join(_WRAPPERS) + r")\s*\{")


def _matching_brace(text: str, open_idx: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_idx``, or -1 when it is never closed.

    Escaped braces (``\\{`` / ``\\}``) are literal characters, not grouping braces.
    """
    depth = 0
    i = open_idx
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in "{}":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _last_boxed(text: str) -> str | None:
    """Content of the last well-formed, non-empty top-level ``\\boxed{..}``/``\\fbox{..}`` in ``text``.

    Scans left to right; a box whose brace is never closed is skipped (scanning resumes right after its
    opening brace, so a later well-formed box still counts). A box nested in another box is part of the
    outer one; ``\\boxed{\\boxed{5}}`` unwraps to ``5``.
    """
    last = None
    pos = 0
    while True:
        m = _BOX_OPEN.search(text, pos)
        if m is None:
            break
        brace = m.end() - 1
        close = _matching_brace(text, brace)
        if close < 0:  # malformed: unclosed brace
            pos = m.end()
            continue
        content = text[brace + 1 : close].strip()
        if content:
            last = content
        pos = close + 1
    while last is not None:  # unwrap \boxed{\boxed{x}}
        m = _BOX_OPEN.match(last)
        if m is None or _matching_brace(last, m.end() - 1) != len(last) - 1:
            break
        inner = last[m.end() : -1].strip()
        if not inner:
            break
        last = inner
    return last


def _unwrap_text_macros(s: str) -> str:
    """Replace every ``\\text{X}`` (and ``\\textbf``, ``\\mathrm``, ... see ``_WRAPPERS``) by ``X``."""
    out = []
    pos = 0
    while True:
        m = _WRAPPER_OPEN.search(s, pos)
        if m is None:
            out.append(s[pos:])
            break
        close = _matching_brace(s, m.end() - 1)
        if close < 0:
            out.append(s[pos:])
            break
        out.append(s[pos : m.start()])
        out.append(s[m.end() : close])
        pos = close + 1
    return "".join(out)


# ----------------------------------------------------------------------------------------------------------
# Candidate cleaning and multiple choice
# ----------------------------------------------------------------------------------------------------------
_MATH_DELIMS = ((r"\(", r"\)"), (r"\[", r"\]"), ("$$", "$$"), ("$", "$"))


def _strip_math_delimiters(s: str) -> str:
    s = s.strip()
    changed = True
    while changed:
        changed = False
        for left, right in _MATH_DELIMS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)].strip()
                changed = True
                break
    return s


def _clean_candidate(s: str) -> str:
    """Trim whitespace, markdown emphasis (``**``) and math delimiters (``$..$``, ``\\(..\\)``)."""
    s = s.strip().strip("*_ ").strip()
    return _strip_math_delimiters(s)


def _strip_full_stop(s: str) -> str:
    """Drop a trailing sentence full stop ("42." -> "42"); "0.5" and "..." inside are kept."""
    return _strip_math_delimiters(s[:-1].rstrip()) if s.endswith(".") and len(s) > 1 else s


# "(b)", "b)", "B.", "B:", "[B]", "Option B", "choice (b)", "B" (whole candidate), optionally followed by the
# option text ("(B) less than 30%", "B. less than 30%").
_OPTION_WORD = r"(?:option|choice|answer)\s*"
_LETTER_WHOLE = re.compile(r"^(?:" + _OPTION_WORD + r")?[\(\[]?\s*([A-Za-z])\s*[\)\]]?\s*[.:]?$", re.I)
_LETTER_FORMATTED = re.compile(
    r"^(?:" + _OPTION_WORD + r"[\(\[]?\s*([A-Za-z])\s*[\)\]]?"
    r"|[\(\[]\s*([A-Za-z])\s*[\)\]]|([A-Za-z])\s*[.:)])"
    r"\s*[.:]?$",
    re.I,
)
_LETTER_WITH_TEXT = re.compile(
    r"^(?:" + _OPTION_WORD + r")?(?:[\(\[]\s*([A-Za-z])\s*[\)\]]|([A-Za-z])[.:)])\s+(.+)$", re.I
)
_PUNCT_TABLE = str.maketrans("", "", string.punctuation + string.whitespace)


def _option_key(s: str) -> str:
    """Case-, space- and punctuation-insensitive key of an option text (LaTeX text macros unwrapped)."""
    text = _unwrap_text_macros(_strip_math_delimiters(s)).replace("\\%", "%")
    return text.casefold().translate(_PUNCT_TABLE)


def _normalise_choices(choices) -> dict[str, str] | None:
    if choices is None:
        return None
    if isinstance(choices, Mapping):
        items = list(choices.items())
    elif isinstance(choices, Sequence) and not isinstance(choices, str):
        items = [(chr(ord("A") + i), text) for i, text in enumerate(choices)]
    else:
        raise TypeError(
            f"choices must be a mapping {{letter: text}} or a sequence of texts, got {type(choices).__name__}"
        )
    out: dict[str, str] = {}
    for letter, text in items:
        if not isinstance(letter, str) or len(letter) != 1 or not letter.isalpha():
            raise ValueError(f"choice keys must be single letters, got {letter!r}")
        if not isinstance(text, str):
            raise TypeError(f"choice {letter!r} text must be a str, got {type(text).__name__}")
        out[letter.upper()] = text
    return out


def _canonical_choice(candidate: str, choices: dict[str, str] | None) -> str | None:
    """The option letter ``candidate`` designates, or None.

    With ``choices``: a bare or formatted letter that is an option ("b", "(b)", "B.", "Option B"), a
    formatted letter followed by text ("(B) less than 30%"; the letter wins), or the option text itself
    (compared with :func:`_option_key`). Otherwise (and without ``choices``) only explicitly formatted
    letters ("(b)", "B.", "Option B") or a bare upper-case letter; a bare lowercase letter may be a
    variable and is kept.
    """
    if choices:
        m = _LETTER_WHOLE.match(candidate)
        if m and m.group(1).upper() in choices:
            return m.group(1).upper()
        m = _LETTER_WITH_TEXT.match(candidate)
        if m and (m.group(1) or m.group(2)).upper() in choices:
            return (m.group(1) or m.group(2)).upper()  # an explicit letter wins over its (mis)quoted text
        key = _option_key(candidate)
        if key:
            hits = [letter for letter, text in choices.items() if _option_key(text) == key]
            if len(hits) == 1:
                return hits[0]
    m = _LETTER_FORMATTED.match(candidate)
    if m:
        return next(g for g in m.groups() if g).upper()
    if re.fullmatch(r"[A-Z]", candidate):
        return candidate
    return None


def _finalise(candidate: str, choices: dict[str, str] | None) -> str:
    cleaned = _clean_candidate(candidate)
    letter = _canonical_choice(_unwrap_text_macros(cleaned).strip(), choices)
    if letter is not None:
        return letter
    cleaned = _strip_full_stop(cleaned)
    if not cleaned:
        return NO_ANSWER
    letter = _canonical_choice(_unwrap_text_macros(cleaned).strip(), choices)
    return letter if letter is not None else cleaned


# ----------------------------------------------------------------------------------------------------------
# Conservative fallbacks
# ----------------------------------------------------------------------------------------------------------
_ANSWER_PHRASE = re.compile(
    r"(?:\b(?:the\s+)?(?:final\s+|correct\s+)?answer[*_]*\s+is\s*:?|\b(?:final\s+)?answer\s*[*_]*\s*:)\s*",
    re.I,
)
_MAX_FALLBACK_CHARS = 200


def _phrase_answer(segment: str) -> str | None:
    """Text after the last "answer is" / "answer:" phrase in ``segment``, up to the end of its sentence."""
    matches = list(_ANSWER_PHRASE.finditer(segment))
    if not matches:
        return None
    rest = segment[matches[-1].end() :]
    # cut at the end of the sentence: ". " / "! " / "? " (a decimal point such as "0.5" is not an end)
    end = re.search(r"(?<=[^\d\s])\.(?=\s|$)|(?<=\d)\.(?=\s+\S|$)|[!?](?=\s|$)", rest)
    if end is not None:
        rest = rest[: end.start()]
    rest = rest.strip()
    if not rest or len(rest) > _MAX_FALLBACK_CHARS:
        return None
    return rest


def _fallback(text: str, choices: dict[str, str] | None) -> str | None:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    last_line = lines[-1]
    found = _phrase_answer(last_line)
    if found is not None:
        return found
    # the final sentence may wrap over lines: "... so the final\nanswer is 7."
    flat = " ".join(lines)
    sentences = re.split(r"(?<=[^\d\s][.!?])\s+|(?<=\d[.!?])\s+(?=[A-Z])", flat)
    final_sentence = sentences[-1].strip() if sentences else ""
    found = _phrase_answer(final_sentence)
    if found is not None:
        return found
    # a last line that is nothing but an option ("(B)", "Option C", or the option's text)
    if choices and len(last_line) <= _MAX_FALLBACK_CHARS:
        if _canonical_choice(_unwrap_text_macros(_clean_candidate(last_line)), choices) is not None:
            return last_line
    return None


def extract_answer(text: str | None, choices: Mapping[str, str] | Sequence[str] | None = None) -> str:
    """The final answer of one response, or :data:`NO_ANSWER` (VisConf appendix A).

    Order of rules:
      1. the last well-formed ``\\boxed{...}`` / ``\\boxed {...}`` / ``\\fbox{...}`` (nested braces allowed,
         unclosed boxes skipped, ``\\boxed{\\boxed{x}}`` unwrapped);
      2. otherwise the last "The answer is X" / "Answer: X" / "Final answer: X" in the last non-empty line,
         or in the final sentence; with ``choices``, a last line that is only an option;
      3. otherwise :data:`NO_ANSWER`.
    The candidate is trimmed (``$..$``, ``**``, trailing full stop) and multiple-choice answers become the
    upper-case letter: with ``choices`` ``{letter: text}`` (or a list of texts for A, B, ...), "b", "(b)",
    "B.", "Option B" and the option text itself (case/space/punctuation-insensitive) map to "B"; without
    ``choices`` only explicitly formatted letters ("(b)", "B.", "Option B") do.

    Args:
        text: the response; ``None`` or empty gives :data:`NO_ANSWER`.
        choices: optional options ``{"A": "...", "B": "..."}``.
    Raises:
        TypeError: ``text`` is neither ``str`` nor ``None``.
    """
    if text is None:
        return NO_ANSWER
    if not isinstance(text, str):
        raise TypeError(f"extract_answer expects text as str or None, got {type(text).__name__}")
    options = _normalise_choices(choices)
    if not text.strip():
        return NO_ANSWER
    boxed = _last_boxed(text)
    if boxed is not None:
        return _finalise(boxed, options)
    found = _fallback(text, options)
    if found is not None:
        return _finalise(found, options)
    return NO_ANSWER


# ----------------------------------------------------------------------------------------------------------
# Equivalence
# ----------------------------------------------------------------------------------------------------------
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|~|\\left|\\right|\\displaystyle")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_MATH_WORDS = re.compile(r"sin|cos|tan|cot|sec|csc|log|ln|exp|sqrt|pi|inf|infty|deg|mod|frac|dfrac")
_MAX_MATH_CHARS = 300

_STATS = {"math_verify_calls": 0, "parse_failures": 0, "verify_failures": 0}


def equivalence_stats() -> dict[str, int]:
    """Counters of math-verify use since import: calls and caught parse / verify failures (timeouts)."""
    return dict(_STATS)


def _normalised(s: str) -> str:
    """Cheap canonical string: delimiters, text macros, spacing and whitespace removed, casefolded."""
    s = _strip_math_delimiters(s)
    s = _unwrap_text_macros(s)
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


def _timeout_seconds() -> int | None:
    # math_verify's timeouts use signal.alarm, which only works in the main thread.
    return 2 if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=65536)
def _parse_math(s: str):
    """``math_verify.parse`` of one answer (wrapped in ``$..$``), or None when nothing symbolic came out.

    Only math-verify's own failures are caught: the LaTeX parser raises plain ``Exception`` on
    malformed input and ``TimeoutException`` (a ``BaseException``) on slow input; both are counted in
    :func:`equivalence_stats` and logged, and the answer then compares by string only.
    """
    import sympy
    from math_verify import parse
    from math_verify.errors import TimeoutException

    _STATS["math_verify_calls"] += 1
    body = _strip_math_delimiters(s)
    try:
        parsed = parse("$" + body + "$", parsing_timeout=_timeout_seconds(), raise_on_error=True)
    except (Exception, TimeoutException) as err:  # noqa: BLE001 - latex2sympy raises bare Exception
        _STATS["parse_failures"] += 1
        level = logging.WARNING if isinstance(err, TimeoutException) else logging.DEBUG
        logger.log(level, "math_verify could not parse %r: %s: %s", s[:80], type(err).__name__, err)
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
    from math_verify.errors import TimeoutException

    try:
        t = _timeout_seconds()
        return bool(verify(pa, pb, timeout_seconds=t, raise_on_error=True)
                    or verify(pb, pa, timeout_seconds=t, raise_on_error=True))
    except (Exception, TimeoutException) as err:  # noqa: BLE001 - sympy raises a zoo of types here
        _STATS["verify_failures"] += 1
        logger.debug("math_verify could not compare: %s: %s", type(err).__name__, err)
        return False


_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:/\d*[1-9]\d*)?")
_PLAIN_FRAC = re.compile(r"([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d*[1-9]\d*)\}")


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
    fa, fb = _plain_number(na), _plain_number(nb)
    if fa is not None and fb is not None:
        if fa == fb:
            return True
        if (fa.denominator == fb.denominator == 1 and "." not in na + nb) or _far_apart(fa, fb):
            return False  # different integers, or clearly different numbers
    if not (_looks_mathematical(na) and _looks_mathematical(nb)):
        return False
    pa, pb = _parse_math(a), _parse_math(b)
    if pa is None or pb is None or _clearly_different_numbers(a, b):
        return False
    return _verify(pa, pb)


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
        ``50\\% == 0.5`` and ``50\\% == 50`` (math-verify's percentage rule), floats rounded to 6 places.
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


def canonical_answer_classes(answers: Sequence[str]) -> tuple[list[int], list[str]]:
    """Group one question's answers into equivalence classes for voting.

    Rule (math equivalence can be non-transitive, e.g. ``0.5 ~ 50\\% ~ 50``): answers are visited in order;
    each is compared with :func:`answers_equal` to every class representative in order of creation and
    joins the first class that matches, else opens a new class with itself as representative. All
    :data:`NO_ANSWER` strings share one class (VisConf: unextractable responses get one shared label),
    which matches nothing else.

    Args:
        answers: ``[N]`` extracted answers.
    Returns:
        ``(class_ids, representatives)``: ``class_ids[i]`` in ``0..C-1`` numbered by first occurrence, and
        ``representatives[c]`` the first answer of class ``c``.
    """
    if isinstance(answers, str) or not isinstance(answers, Sequence):
        raise TypeError(f"canonical_answer_classes expects a list of str, got {type(answers).__name__}")
    ids: list[int] = []
    reps: list[str] = []
    no_answer_class: int | None = None
    for i, ans in enumerate(answers):
        if not isinstance(ans, str):
            raise TypeError(f"answers[{i}] is {type(ans).__name__}, expected str")
        if ans == NO_ANSWER:
            if no_answer_class is None:
                no_answer_class = len(reps)
                reps.append(ans)
            ids.append(no_answer_class)
            continue
        for c, rep in enumerate(reps):
            if c != no_answer_class and answers_equal(ans, rep):
                ids.append(c)
                break
        else:
            ids.append(len(reps))
            reps.append(ans)
    return ids, reps

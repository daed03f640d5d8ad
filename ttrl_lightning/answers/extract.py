"""Answer extraction: the final answer of one response (VisConf appendix A, "Answer extraction").

:func:`extract_answer` takes the last well-formed ``\\boxed{...}`` (or ``\\fbox{...}``), else a conservative
final-line / final-sentence fallback ("The answer is X", "Answer: X", "Final answer: X"), trims it and
canonicalises multiple-choice answers to the upper-case option letter (:mod:`.choices`);
:data:`~.label.NO_ANSWER` when nothing is found.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

from .choices import canonical_choice, normalise_choices
from .label import NO_ANSWER
from .latex import brace_pairs, strip_math_delimiters, unwrap_text_macros

__all__ = ["extract_answer"]

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _strip_span(text: str, lo: int, hi: int) -> tuple[int, int]:
    """``text[lo:hi].strip()`` as indices."""
    while lo < hi and text[lo].isspace():
        lo += 1
    while hi > lo and text[hi - 1].isspace():
        hi -= 1
    return lo, hi


def _last_boxed(text: str) -> str | None:
    """Content of the last well-formed, non-empty top-level ``\\boxed{..}``/``\\fbox{..}`` in ``text``.

    Scans left to right; a box whose brace is never closed is skipped (scanning resumes right after its
    opening brace, so a later well-formed box still counts). A box nested in another box is part of the
    outer one; ``\\boxed{\\boxed{5}}`` unwraps to ``5``. Linear in ``len(text)``: the brace pairs are found in
    one pass (``latex.brace_pairs``), so unclosed or deeply nested boxes cost no rescans.
    """
    closes = brace_pairs(text)
    last, pos = None, 0
    for m in _BOX_OPEN.finditer(text):
        if m.start() < pos:  # inside the box taken last
            continue
        close = closes.get(m.end() - 1, -1)
        if close < 0:  # malformed: unclosed brace
            continue
        lo, hi = _strip_span(text, m.end(), close)
        if hi > lo:
            last = (lo, hi)
        pos = close + 1
    if last is None:
        return None
    lo, hi = last
    while True:  # unwrap \boxed{\boxed{x}}
        m = _BOX_OPEN.match(text, lo, hi)
        if m is None or closes.get(m.end() - 1, -1) != hi - 1:
            break
        inner = _strip_span(text, m.end(), hi - 1)
        if inner[1] <= inner[0]:
            break
        lo, hi = inner
    return text[lo:hi]


def _clean_candidate(s: str) -> str:
    """Trim whitespace, markdown emphasis (``**``) and math delimiters (``$..$``, ``\\(..\\)``)."""
    s = s.strip().strip("*_ ").strip()
    return strip_math_delimiters(s)


def _strip_full_stop(s: str) -> str:
    """Drop a trailing sentence full stop ("42." -> "42"); "0.5" and "..." inside are kept."""
    return strip_math_delimiters(s[:-1].rstrip()) if s.endswith(".") and len(s) > 1 else s



def _finalise(candidate: str, choices: dict[str, str] | None) -> str:
    cleaned = _clean_candidate(candidate)
    letter = canonical_choice(unwrap_text_macros(cleaned).strip(), choices)
    if letter is not None:
        return letter
    cleaned = _strip_full_stop(cleaned)
    if not cleaned:
        return NO_ANSWER
    letter = canonical_choice(unwrap_text_macros(cleaned).strip(), choices)
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
        if canonical_choice(unwrap_text_macros(_clean_candidate(last_line)), choices) is not None:
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
    options = normalise_choices(choices)
    if not text.strip():
        return NO_ANSWER
    boxed = _last_boxed(text)
    if boxed is not None:
        return _finalise(boxed, options)
    found = _fallback(text, options)
    if found is not None:
        return _finalise(found, options)
    return NO_ANSWER

"""Brace-aware LaTeX scanning shared by extraction and equivalence (VisConf appendix A).

* :func:`matching_brace` -- the ``}`` closing a ``{`` (escaped ``\\{`` / ``\\}`` are literal characters);
  :func:`brace_pairs` -- all of them in one pass;
* :func:`unwrap_text_macros` -- ``\\text{X}``, ``\\mathrm{X}``, ... -> ``X``;
* :func:`strip_math_delimiters` -- ``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]`` removed (repeatedly).
"""
from __future__ import annotations

import re

__all__ = ["brace_pairs", "matching_brace", "unwrap_text_macros", "strip_math_delimiters"]

_WRAPPERS = ("text", "textbf", "textit", "textrm", "mathrm", "mathbf", "mathit", "mbox", "operatorname")
_WRAPPER_OPEN = re.compile(r"\\(?:" + "|".join(_WRAPPERS) + r")\s*\{")


def _grouping_braces(text: str, start: int = 0):
    """``(index, char)`` of every grouping ``{`` / ``}`` from ``start`` on; escaped ``\\{`` / ``\\}`` are
    literal characters and skipped."""
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in "{}":
            i += 2
            continue
        if ch in "{}":
            yield i, ch
        i += 1


def matching_brace(text: str, open_idx: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_idx``, or -1 when it is never closed.

    Escaped braces (``\\{`` / ``\\}``) are literal characters, not grouping braces.
    """
    depth = 0
    for i, ch in _grouping_braces(text, open_idx):
        depth += 1 if ch == "{" else -1
        if depth == 0:
            return i
    return -1


def brace_pairs(text: str) -> dict[int, int]:
    """``{open index: close index}`` of every grouping brace pair of ``text`` in one pass (a stack; escaped
    ``\\{`` / ``\\}`` are characters): what :func:`matching_brace` gives one brace at a time, for all of
    them in O(len(text))."""
    closes, stack = {}, []
    for i, ch in _grouping_braces(text):
        if ch == "{":
            stack.append(i)
        elif stack:
            closes[stack.pop()] = i
    return closes


def unwrap_text_macros(s: str) -> str:
    """Replace every ``\\text{X}`` (and ``\\textbf``, ``\\mathrm``, ... see ``_WRAPPERS``) by ``X``."""
    out = []
    pos = 0
    while True:
        m = _WRAPPER_OPEN.search(s, pos)
        if m is None:
            out.append(s[pos:])
            break
        close = matching_brace(s, m.end() - 1)
        if close < 0:
            out.append(s[pos:])
            break
        out.append(s[pos : m.start()])
        out.append(s[m.end() : close])
        pos = close + 1
    return "".join(out)


_MATH_DELIMS = ((r"\(", r"\)"), (r"\[", r"\]"), ("$$", "$$"), ("$", "$"))


def strip_math_delimiters(s: str) -> str:
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

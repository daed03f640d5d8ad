"""Multiple-choice answers: option tables and the option letter a candidate designates (VisConf appendix A).

An answer that designates an option becomes its upper-case letter: with ``choices`` ``{letter: text}`` (or a
list of texts for A, B, ...) "b", "(b)", "B.", "Option B", "(B) some text" and the option text itself
(case-, space- and punctuation-insensitive, see :func:`option_key`) all give "B"; without ``choices`` only
explicitly formatted letters or a bare upper-case letter do.
"""
from __future__ import annotations

import re
import string
from typing import Mapping, Sequence

from .latex import strip_math_delimiters, unwrap_text_macros

__all__ = ["option_key", "normalise_choices", "canonical_choice"]

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


def option_key(s: str) -> str:
    """Case-, space- and punctuation-insensitive key of an option text (LaTeX text macros unwrapped)."""
    text = unwrap_text_macros(strip_math_delimiters(s)).replace("\\%", "%")
    return text.casefold().translate(_PUNCT_TABLE)


def normalise_choices(choices) -> dict[str, str] | None:
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


def canonical_choice(candidate: str, choices: dict[str, str] | None) -> str | None:
    """The option letter ``candidate`` designates, or None.

    With ``choices``: a bare or formatted letter that is an option ("b", "(b)", "B.", "Option B"), a
    formatted letter followed by text ("(B) less than 30%"; the letter wins), or the option text itself
    (compared with :func:`option_key`). Otherwise (and without ``choices``) only explicitly formatted
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
        key = option_key(candidate)
        if key:
            hits = [letter for letter, text in choices.items() if option_key(text) == key]
            if len(hits) == 1:
                return hits[0]
    m = _LETTER_FORMATTED.match(candidate)
    if m:
        return next(g for g in m.groups() if g).upper()
    if re.fullmatch(r"[A-Z]", candidate):
        return candidate
    return None


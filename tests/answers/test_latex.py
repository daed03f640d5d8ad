"""Brace-aware LaTeX scanning shared by extraction and equivalence: ttrl_lightning.answers.latex."""
import pytest

from ttrl_lightning.answers.latex import matching_brace, strip_math_delimiters, unwrap_text_macros


@pytest.mark.parametrize(
    "text, open_idx, expected",
    [
        ("{a}", 0, 2),
        (r"\frac{1}{2}", 5, 7),
        ("{a{b}c}", 0, 6),
        (r"{a\}b}", 0, 5),  # an escaped brace is a literal character
        ("{a{b}", 0, -1),  # never closed
    ],
)
def test_matching_brace(text, open_idx, expected):
    assert matching_brace(text, open_idx) == expected


def test_unwrap_text_macros():
    assert unwrap_text_macros(r"\text{B}") == "B"
    assert unwrap_text_macros(r"5\ \mathrm{cm} and \textbf{x}") == r"5\ cm and x"
    assert unwrap_text_macros(r"\text{unclosed") == r"\text{unclosed"


@pytest.mark.parametrize(
    "text, expected",
    [("$3$", "3"), ("$$ x $$", "x"), (r"\(\frac{1}{2}\)", r"\frac{1}{2}"), (r"\[$7$\]", "7"), ("3$", "3$")],
)
def test_strip_math_delimiters(text, expected):
    assert strip_math_delimiters(text) == expected

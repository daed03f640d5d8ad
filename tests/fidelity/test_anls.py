"""ANLS: the ST-VQA formula on hand-worked cases; Levenshtein against a brute-force recursion."""

import functools

import pytest

from ttrl_lightning.fidelity import anls, anls_score, levenshtein, normalise_text


def _lev_reference(a, b):
    @functools.lru_cache(None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


@pytest.mark.parametrize(
    "a, b", [("kitten", "sitting"), ("", "abc"), ("flaw", "lawn"), ("river", "river"), ("abcdef", "azced")]
)
def test_levenshtein(a, b):
    assert levenshtein(a, b) == _lev_reference(a, b) == levenshtein(b, a)


def test_anls_hand_worked():
    assert anls_score("River", ["RIVER"]) == 1.0  # case-insensitive
    assert anls_score("rivr", "river") == pytest.approx(1 - 1 / 5)  # NL = 0.2 < 0.5
    assert anls_score("rxxer", "river") == pytest.approx(1 - 2 / 5)
    assert anls_score("rxxxr", "river") == 0.0  # NL = 0.6 >= 0.5 -> 0
    assert anls_score("abcd", "abef") == 0.0  # NL = 0.5 exactly -> 0
    assert anls_score("tiger", ["lion", "tigers"]) == pytest.approx(1 - 1 / 6)  # best reference
    assert anls_score("", "") == 1.0
    assert anls(["river", "rxxxr"], [["river"], ["river"]]) == pytest.approx(0.5)
    assert anls_score("ｒｉｖｅｒ", "river") == 1.0  # NFKC folds full-width letters
    assert (
        anls_score("river.", "river") < 1.0 and anls_score("river.", "river", strip_punctuation=True) == 1.0
    )
    assert normalise_text("  Big   Cat ") == "big cat"


def test_anls_refuses_mismatched_lists():
    with pytest.raises(ValueError, match="one reference list per prediction"):
        anls(["a"], [])
    with pytest.raises(ValueError, match="at least one reference"):
        anls_score("a", [])

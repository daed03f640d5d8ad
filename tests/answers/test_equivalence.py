"""Hand-written cases for answer equivalence (VisConf appendix A): ttrl_lightning.answers.equivalence."""
import logging
import threading

import pytest

from ttrl_lightning.answers import NO_ANSWER, answers_equal, equivalence_stats


@pytest.mark.parametrize(
    "a, b",
    [
        ("0.5", r"\frac{1}{2}"),
        ("1/2", "0.5"),
        (r"\frac{1}{2}", "1/2"),
        (r"\dfrac{3}{4}", "0.75"),
        (r"50\%", "0.5"),  # percentage equals its value ...
        (r"50\%", "50"),  # ... and its bare number (math-verify's grading rule)
        ("x=3", "3"),
        ("10^{2}", "100"),
        ("2", "2.0"),
        ("4/2", "2"),
        (r"\sqrt{2}", "1.41421356"),
        ("a", "A"),
        (r"\text{B}", "B"),
        ("$3$", "3"),
        ("x = 3", "x=3"),
        ("Paris", "paris"),
        ("less than 30%", "Less than 30 %"),
        ("0.3333333", "1/3"),  # within math-verify's 6-decimal rounding
        (r"\frac{6}{8}", "0.75"),
        ("x=3", r"\sqrt{9}"),
        ("2^{100}", "1267650600228229401496703205376"),
        ("3xy^2", "3y^2x"),  # a two-letter run with math signs is math
        (r"\sin x", r"\sin(x)"),
    ],
)
def test_answers_equal_true(a, b):
    assert answers_equal(a, b)
    assert answers_equal(b, a)  # symmetric


@pytest.mark.parametrize(
    "a, b",
    [
        ("2", "3"),
        ("0.5", "0.25"),
        ("A", "B"),
        ("x=3", "x=4"),
        ("hello world", "world hello"),  # prose is never parsed as a product of symbols
        ("0.5", "50"),  # percentage equality is not transitive
        ("12345678901234567", "12345678901234568"),  # integers compare exactly
        ("1/0", "1/00"),
        ("", ""),
        ("0.333", "1/3"),
        ("x=3", r"\sqrt{10}"),
        (r"\frac{1}{3}", r"\frac{1}{4}"),
        ("no", "on"),  # words, not n*o
        ("xy", "yx"),  # a bare two-letter answer is treated as a word (documented limitation)
    ],
)
def test_answers_equal_false(a, b):
    assert not answers_equal(a, b)
    assert not answers_equal(b, a)


def test_clearly_different_numbers_skip_symbolic_comparison(monkeypatch):
    # constants far apart are decided without math-verify's (slow) symbolic verify; near ones still use it
    import ttrl_lightning.answers.equivalence as equivalence

    def no_verify(*_):
        raise AssertionError("math_verify.verify should not be needed")

    monkeypatch.setattr(equivalence, "_verify", no_verify)
    assert not answers_equal(r"\sqrt{71}", "13")
    assert not answers_equal("y=17", r"\sqrt{3}")
    assert not answers_equal("0.12345", r"\frac{7}{9}")
    with pytest.raises(AssertionError, match="should not be needed"):
        answers_equal(r"\sqrt{81}", "x=9")


def test_no_answer_never_equal():
    assert not answers_equal(NO_ANSWER, NO_ANSWER)
    assert not answers_equal(NO_ANSWER, "3")
    assert not answers_equal("3", NO_ANSWER)


def test_answers_equal_type_errors():
    with pytest.raises(TypeError):
        answers_equal(3, "3")
    with pytest.raises(TypeError):
        answers_equal("3", None)


def test_answers_equal_slow_input_times_out_not_hangs(caplog):
    # deeply nested parentheses make the LaTeX parser slow; the 2 s math-verify timeout is caught,
    # counted, logged, and the answer then compares by string only
    before = equivalence_stats()["parse_failures"]
    nested = "(" * 80 + "1" + ")" * 80  # ~40 s to parse here without the timeout
    with caplog.at_level(logging.WARNING, logger="ttrl_lightning.answers"):
        assert not answers_equal(nested, "1")
    assert equivalence_stats()["parse_failures"] == before + 1
    assert any("Timeout" in r.getMessage() for r in caplog.records)
    assert answers_equal(nested, nested)  # identical strings need no parse


def test_answers_equal_in_thread():
    # math-verify's signal-based timeout only works in the main thread; other threads run without it
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", answers_equal("0.125", r"\frac{1}{8}")))
    t.start()
    t.join()
    assert out["r"] is True

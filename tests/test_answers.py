"""Hand-written cases for answer extraction and equivalence (VisConf appendix A)."""
import logging
import threading

import pytest

from ttrl_lightning.answers import (
    NO_ANSWER,
    answers_equal,
    canonical_answer_classes,
    equivalence_stats,
    extract_answer,
)

CHOICES = {"A": "more than 50%", "B": "less than 30%", "C": "exactly 40%", "D": "none of these"}


# --------------------------------------------------------------------------------------------- boxed
@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so $\boxed{42}$", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{\frac{\sqrt{3}}{2}} done", r"\frac{\sqrt{3}}{2}"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces are literal
        (r"first \boxed{1}, then \boxed{2}, finally \boxed{3}", "3"),  # last wins
        (r"\boxed {7}", "7"),
        (r"\fbox{8}", "8"),
        (r"\boxed{\boxed{5}}", "5"),
        (r"\boxed{x=3}", "x=3"),
        (r"\boxed{42.}", "42"),
        (r"\boxed{0.5}", "0.5"),
        (r"$\boxed{\text{Paris}}$", r"\text{Paris}"),
    ],
)
def test_boxed(text, expected):
    assert extract_answer(text) == expected


def test_malformed_boxed_is_skipped():
    # the unclosed last box is skipped, the earlier well-formed one counts
    assert extract_answer(r"\boxed{3} but maybe \boxed{4") == "3"
    # an unclosed box before a well-formed one does not swallow it
    assert extract_answer(r"\boxed{oops and later \boxed{9}") == "9"
    # only malformed / empty boxes and no fallback phrase -> no answer
    assert extract_answer(r"we conclude \boxed{12") == NO_ANSWER
    assert extract_answer(r"\boxed{}") == NO_ANSWER
    assert extract_answer(r"\boxed{7} \boxed{ }") == "7"


def test_boxed_beats_fallback_phrase():
    assert extract_answer("\\boxed{4}\nThe answer is 5.") == "4"


# --------------------------------------------------------------------------------------------- multiple choice
@pytest.mark.parametrize(
    "text",
    [r"\boxed{B}", r"\boxed{b}", r"\boxed{(b)}", r"\boxed{B.}", r"\boxed{Option B}", r"\boxed{\text{B}}",
     r"\boxed{(B) less than 30%}", r"\boxed{less than 30%}", r"\boxed{Less Than 30 %}",
     r"\boxed{\text{less than 30\%}}", r"\boxed{less  than 30%.}", "The answer is (B).", "Answer: b",
     "**Final answer:** Option B", "I reasoned a lot.\n(B)"],
)
def test_multiple_choice_with_choices(text):
    assert extract_answer(text, CHOICES) == "B"


def test_multiple_choice_choices_as_list():
    assert extract_answer(r"\boxed{less than 30%}", list(CHOICES.values())) == "B"


def test_multiple_choice_without_choices():
    assert extract_answer(r"\boxed{(b)}") == "B"
    assert extract_answer(r"\boxed{B.}") == "B"
    assert extract_answer(r"\boxed{Option c}") == "C"
    assert extract_answer(r"\boxed{B}") == "B"
    # a bare lowercase letter may be a variable: kept as is without choices
    assert extract_answer(r"\boxed{b}") == "b"
    # option text cannot be mapped without choices
    assert extract_answer(r"\boxed{less than 30%}") == "less than 30%"
    # a final line with only "(B)" is not an answer without choices
    assert extract_answer("I reasoned a lot.\n(B)") == NO_ANSWER


def test_letter_outside_choices_and_unmatched_text_are_kept():
    assert extract_answer(r"\boxed{42}", CHOICES) == "42"
    assert extract_answer(r"\boxed{(E)}", {"A": "x", "B": "y"}) == "E"  # formatted letter, not an option
    assert extract_answer(r"\boxed{e}", {"A": "x", "B": "y"}) == "e"


def test_bad_choices():
    with pytest.raises(ValueError, match="single letters"):
        extract_answer(r"\boxed{A}", {"AB": "x"})
    with pytest.raises(TypeError, match="choices"):
        extract_answer(r"\boxed{A}", 3)


# --------------------------------------------------------------------------------------------- fallbacks
@pytest.mark.parametrize(
    "text, expected",
    [
        ("Lots of work.\nThe answer is 42.", "42"),
        ("Therefore, the final answer is $\\frac{3}{4}$.", r"\frac{3}{4}"),
        ("Work.\nAnswer: 17", "17"),
        ("Work.\nFinal answer: 0.5", "0.5"),
        ("Work.\n**Final Answer:** 12", "12"),
        ("x = 3.5 here. So the answer is 3.5.", "3.5"),
        ("I think so.\nSo the final\nanswer is 7.", "7"),  # final sentence wrapped over lines
        ("Answer:\n-2", "-2"),
    ],
)
def test_fallbacks(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "We got 42 apples. Then we keep thinking.",
        "The answer is 5.\nWait, let me check that again.",  # phrase not in the last line/sentence
        "x = 12\ny = 13\nso we are stuck",
        "The result 7 follows from 3 + 4",
        "42",  # a bare number is not a conservative pattern
        "The answer is",  # phrase with nothing after it
    ],
)
def test_fallbacks_do_not_fire_on_mid_text_numbers(text):
    assert extract_answer(text) == NO_ANSWER


def test_empty_none_and_type_errors():
    assert extract_answer(None) == NO_ANSWER
    assert extract_answer("") == NO_ANSWER
    assert extract_answer("  \n ") == NO_ANSWER
    with pytest.raises(TypeError, match="str"):
        extract_answer(42)
    with pytest.raises(TypeError, match="str"):
        extract_answer([r"\boxed{1}"])


# --------------------------------------------------------------------------------------------- equivalence
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
    import ttrl_lightning.answers as answers

    def no_verify(*_):
        raise AssertionError("math_verify.verify should not be needed")

    monkeypatch.setattr(answers, "_verify", no_verify)
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


# --------------------------------------------------------------------------------------------- classes
def test_canonical_answer_classes():
    answers = ["0.5", NO_ANSWER, "1/2", "3", NO_ANSWER, r"\frac{1}{2}", "x=3", "B", "b"]
    ids, reps = canonical_answer_classes(answers)
    assert ids == [0, 1, 0, 2, 1, 0, 2, 3, 3]
    assert reps == ["0.5", NO_ANSWER, "3", "B"]


def test_canonical_answer_classes_non_transitive_rule():
    # 50% ~ 0.5 and 50% ~ 50 but 0.5 !~ 50: "50" is compared with representatives, not members
    ids, reps = canonical_answer_classes(["0.5", r"50\%", "50"])
    assert ids == [0, 0, 1]
    assert reps == ["0.5", "50"]
    # order matters: with 50% first, both others join its class
    ids, reps = canonical_answer_classes([r"50\%", "0.5", "50"])
    assert ids == [0, 0, 0]


def test_canonical_answer_classes_edge_cases():
    assert canonical_answer_classes([]) == ([], [])
    assert canonical_answer_classes([NO_ANSWER, NO_ANSWER]) == ([0, 0], [NO_ANSWER])
    with pytest.raises(TypeError):
        canonical_answer_classes("0.5")
    with pytest.raises(TypeError, match=r"answers\[1\]"):
        canonical_answer_classes(["1", 2])


def test_extract_then_classes_end_to_end():
    responses = [
        r"... so \boxed{\dfrac{1}{2}}",
        "The answer is 0.5.",
        "I am not sure what to do here",
        r"\boxed{0.25}",
        "Final answer: 1/2",
        r"\boxed{unclosed",
    ]
    answers = [extract_answer(r) for r in responses]
    assert answers == [r"\dfrac{1}{2}", "0.5", NO_ANSWER, "0.25", "1/2", NO_ANSWER]
    ids, reps = canonical_answer_classes(answers)
    assert ids == [0, 0, 1, 2, 0, 1]

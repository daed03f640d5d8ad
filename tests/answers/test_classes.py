"""Hand-written cases for answer classes (VisConf appendix A): ttrl_lightning.answers.classes."""
import pytest

from ttrl_lightning.answers import NO_ANSWER, canonical_answer_classes, extract_answer


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

import pytest

from ttrl_lightning.pseudo_labels import fused_format_score, fused_template


@pytest.mark.parametrize("text,score", [
    (fused_template("reorder", "What is 2 + 1?", r"\boxed{3}"), 1.0),
    ("STRATEGY: reorder\nREWRITTEN PROBLEM: What is 2 + 1?\nSOLUTION:", 2 / 3),
    ("STRATEGY: [name of the strategy]\nREWRITTEN PROBLEM: ...\nSOLUTION: 3", 1 / 3),
    ("strategy: numbers in words\n**Rewritten problem**: two plus one\n## Solution: 3", 1.0),
    ("STRATEGY: <strategy>\nREWRITTEN PROBLEM: a placeholder\nSOLUTION: ---", 0.0),
    ("REWRITTEN PROBLEM: Is x in [0, 1]?\nSOLUTION: yes", 2 / 3),
    (r"The answer is \boxed{3}", 0.0),
    ("", 0.0),
    (None, 0.0),
])
def test_format_score(text, score):
    assert fused_format_score(text) == pytest.approx(score)


def test_header_must_start_a_line():
    assert fused_format_score("my STRATEGY: reorder\nSOLUTION: 3") == pytest.approx(1 / 3)

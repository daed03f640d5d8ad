"""benchmarks/common.py: a pass or a fail only when every paired round agrees, else the spread."""
import pytest

from benchmarks.common import paired_ratios, paired_verdict


def test_paired_ratios_are_round_by_round():
    assert paired_ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    with pytest.raises(ValueError, match="same number of rounds"):
        paired_ratios([1.0], [1.0, 2.0])


@pytest.mark.parametrize("ratios, at_least, expected", [
    ([3.1, 3.4], True, "PASS (every round >= 3x; spread [3.1, 3.4])"),
    ([1.3, 1.6], True, "FAIL (no round >= 3x; spread [1.3, 1.6])"),
    ([2.9, 3.2], True, "no verdict: the rounds' spread [2.9, 3.2] straddles 3x"),
    ([2.9, 2.5], False, "PASS (every round <= 3x; spread [2.5, 2.9])"),
    ([3.5], False, "FAIL (no round <= 3x; spread [3.5, 3.5])"),
])
def test_a_verdict_needs_every_round_on_one_side(ratios, at_least, expected):
    assert paired_verdict(ratios, 3.0, at_least=at_least) == expected

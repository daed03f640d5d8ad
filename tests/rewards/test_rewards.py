"""The reward protocol (``rewards.base``) and the simple rewards (``rewards.simple``), by hand; the curiosity /
coherence terms are checked against their formulas in tests/modules/test_ccrft.py."""
import math

import pytest
import torch

from ttrl_lightning.errors import UserError
from ttrl_lightning.rewards.base import REWARDS, call_reward, resolve_reward
from ttrl_lightning.rewards.simple import DigitsOnly, ExactAnswer, first_integer


@pytest.mark.parametrize("text, expected", [("19<eos>", "19"), ("x -4 then 7", "-4"), ("none", None),
                                            ("", None), ("3.5", "3"), ("a1b22", "1")])
def test_first_integer(text, expected):
    assert first_integer(text) == expected


def test_exact_answer_compares_the_first_integer_with_the_column():
    fn = ExactAnswer()
    got = fn(prompts=["p"] * 5, completions=["12", " 12 is it", "13", "no number", "-3"],
             gold=["12", 12, "12", "12", " -3 "])
    assert got == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert fn.__name__ == "exact_answer[gold]"
    other = ExactAnswer(column="target")
    assert other(prompts=["p"], completions=["7"], target=["7"]) == [1.0]
    with pytest.raises(UserError, match="needs the batch column 'target'"):
        other(prompts=["p"], completions=["7"], gold=["7"])
    # a batch that still says 'answer' for the true answer: one line naming the rename
    with pytest.raises(UserError, match=r"got \['answer'\] \(the true answer's column is 'gold' everywhere"):
        fn(prompts=["p"], completions=["7"], answer=["7"])


def test_digits_only_is_the_share_of_digit_characters():
    got = DigitsOnly()(prompts=["p"] * 3, completions=["12-3", "1a", ""])
    assert got == [1.0, 0.5, 0.0]


def test_resolve_reward_by_name_or_callable_and_refuses_the_rest():
    assert isinstance(resolve_reward("exact_answer"), ExactAnswer)
    assert set(REWARDS.names()) >= {"exact_answer", "digits_only"}

    def trl_style(*, prompts, completions, **kw):  # a TRL GRPOTrainer reward function is taken as it is
        return [float(len(c)) for c in completions]

    assert resolve_reward(trl_style) is trl_style
    with pytest.raises(UserError, match="unknown reward 'nope'; known: digits_only, exact_answer"):
        resolve_reward("nope")
    with pytest.raises(UserError, match="a callable, got int"):
        resolve_reward(3)


def test_call_reward_passes_columns_and_checks_the_output():
    seen = {}

    def fn(*, prompts, completions, answer, completion_ids):
        seen.update(answer=answer, ids=completion_ids)
        return [1, 0.5]

    out = call_reward(fn, ["a", "b"], ["x", "y"], answer=["1", "2"], completion_ids=[[1], [2, 3]])
    assert out.dtype == torch.float32 and out.tolist() == [1.0, 0.5]
    assert seen == {"answer": ["1", "2"], "ids": [[1], [2, 3]]}
    with pytest.raises(ValueError, match="returned 1 values for 2 completions"):
        call_reward(lambda **kw: [1.0], ["a", "b"], ["x", "y"])
    for bad in (None, math.nan, math.inf):
        with pytest.raises(ValueError, match="non-finite value .* at row 1"):
            call_reward(lambda **kw: [0.0, bad], ["a", "b"], ["x", "y"])

"""The reward controls: random_reward (Spurious Rewards) and gold_reward (RLVR's upper bound)."""
import random
from statistics import mean

import pytest

from ttrl_lightning.pseudo_labels import PseudoLabelError, pseudo_label

ROLLOUTS = [{"answer": a} for a in ["7", "7.0", "8", None, "14/2", "x"]]


def test_random_reward_is_bernoulli_from_its_seed_and_ignores_the_answers():
    out = pseudo_label("random_reward", ROLLOUTS, seed=3)
    rng = random.Random(3)  # the reference draw: the same stream, one draw per rollout in order
    assert out.rewards == [1.0 if rng.random() < 0.5 else 0.0 for _ in ROLLOUTS]
    assert out.label is None and not out.abstain
    assert pseudo_label("random_reward", [{"answer": "1"}] * 6, seed=3).rewards == out.rewards
    many = pseudo_label("random_reward", [{"answer": "1"}] * 4000, seed=0, p=0.25).rewards
    assert set(many) == {0.0, 1.0} and mean(many) == pytest.approx(0.25, abs=0.03)
    draws = {tuple(pseudo_label("random_reward", ROLLOUTS * 4, seed=s).rewards) for s in range(5)}
    assert len(draws) == 5


@pytest.mark.parametrize("bad", [{"p": 1.5}, {"p": -0.1}, {"seed": 1.5}, {"seed": True}])
def test_random_reward_refuses_bad_options(bad):
    with pytest.raises(PseudoLabelError, match="random_reward"):
        pseudo_label("random_reward", ROLLOUTS, **{"seed": 0, **bad})


def test_gold_reward_rewards_the_answers_equal_to_gold():
    out = pseudo_label("gold_reward", ROLLOUTS, gold=" 7 ")
    assert out.label == "7" and not out.abstain
    # 7, 7.0 and 14/2 equal 7; 8, the unextractable and "x" do not
    assert out.rewards == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert pseudo_label("gold_reward", ROLLOUTS, gold="8").rewards == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("gold", [None, "", "   "])
def test_gold_reward_without_gold_is_an_error(gold):
    with pytest.raises(PseudoLabelError, match="gold"):
        pseudo_label("gold_reward", ROLLOUTS, gold=gold)

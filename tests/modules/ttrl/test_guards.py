"""The collapse guards inside a TTRL step, on scripted votes worked by hand: RESTRAIN's negative branch
(advantage.negative_shift), DDRL's fixed +-1 advantages, the flip rate and the reward accuracy of a soft reward."""
import pytest
import torch

from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.ttrl.specs import AdvantageSpec
from ttrl_lightning.modules.ttrl.module import fixed_advantages

from .test_module import ScriptedEngine, _module  # noqa: F401  (the scripted engine of the TTRL tests)

SCRIPT = {
    "1+4=": ["5", "5", "5", "5", "6", "5"],   # share 5/6: passes a 0.5 / 0.15 gate
    "2+2=": ["4", "3", "4", "3", "1", "2"],   # share 2/6 < 0.5: fails the gate
    "3+3=": ["6", "7", "6", "7", "6", "8"],   # share 3/6, lead 1/6 > 0.15: passes
}
BATCH = {"prompt": ["1+4=", "2+2=", "3+3="], "id": ["a", "b", "c"], "gold": ["5", "4", "6"]}
GATE = {"labeler": "majority", "options": {"min_share": 0.5, "min_margin": 0.15}}


def _scored(voting, advantage=None):
    m = _module(SCRIPT, voting, **({"advantage": advantage} if advantage else {}))
    votes = m.rollout(BATCH)
    scored = m.scored(votes, BATCH)
    return m, scored, m.group_advantages(scored)


def test_the_gate_without_a_negative_branch_abstains():
    m, scored, adv = _scored(GATE)
    assert [lab.negative for lab in scored.detail.labels] == [False, True, False]
    assert scored.group_mask.tolist() == [True, False, True]
    assert adv.view(3, 3)[1].tolist() == [0.0, 0.0, 0.0]


def test_the_negative_branch_trains_a_gated_question_with_minus_delta():
    m, scored, adv = _scored(GATE, AdvantageSpec(negative_shift=0.25))
    assert scored.group_mask.tolist() == [True, True, True]  # kept: trained with -delta
    assert scored.rewards.view(3, 3)[1].tolist() == [0.0, 0.0, 0.0]
    assert adv.view(3, 3)[1].tolist() == [-0.25, -0.25, -0.25]
    # the other questions' advantages are GRPO's, as without the branch
    _, _, plain = _scored(GATE)
    torch.testing.assert_close(adv.view(3, 3)[[0, 2]], plain.view(3, 3)[[0, 2]])
    from ttrl_lightning.modules.ttrl.monitor import ttrl_metrics

    metrics = ttrl_metrics(scored, BATCH["gold"], None, m.counters, step_index=0, negative_branch=True)
    assert metrics["negative_rate"] == pytest.approx(1 / 3) and metrics["coverage"] == pytest.approx(2 / 3)


def test_fixed_advantages_by_hand():
    rewards = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.2, 0.6, 1.0], [1.0, 0.0, 0.0]])
    keep = torch.tensor([True, True, True, False])
    assert fixed_advantages(rewards, keep).tolist() == [[1, 1, -1], [0, 0, 0], [-1, 0, 1], [0, 0, 0]]
    # in the module: question c's trained rows 6, 7, 6 (label 6) -> rewards 1, 0, 1 -> +1, -1, +1
    _, scored, adv = _scored({"labeler": "majority"}, AdvantageSpec(rule="fixed"))
    assert adv.view(3, 3)[2].tolist() == [1.0, -1.0, 1.0]
    assert adv.view(3, 3)[0].tolist() == [0.0, 0.0, 0.0]  # a: 5, 5, 5 all rewarded: equal rewards


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_a_negative_shift_below_zero_is_refused(bad):
    with pytest.raises(UserError, match="negative_shift"):
        AdvantageSpec(negative_shift=bad)


def test_the_flip_rate_counts_questions_whose_majority_changed():
    from ttrl_lightning.modules.ttrl.monitor import ttrl_metrics

    m, scored, _ = _scored({"labeler": "majority"})
    first = ttrl_metrics(scored, BATCH["gold"], None, m.counters, step_index=0)
    assert "flip_rate" not in first  # no question seen before
    assert m.counters.last_majority == {"a": "5", "b": "4", "c": "6"}
    m.counters.last_majority["c"] = "7"  # as if c's majority had been 7 the last time
    again = ttrl_metrics(scored, BATCH["gold"], None, m.counters, step_index=1)
    assert again["flip_rate"] == pytest.approx(1 / 3)
    # equivalent answers do not flip; the state survives a checkpoint
    m.counters.last_majority["a"] = "5.0"
    state = m.counters.state_dict()
    m.counters.load_state_dict(state)
    assert ttrl_metrics(scored, BATCH["gold"], None, m.counters, step_index=2)["flip_rate"] == 0.0


def test_reward_accuracy_of_a_soft_reward_is_one_minus_the_mean_gap():
    from ttrl_lightning.modules.ttrl.monitor import ttrl_metrics

    m, scored, _ = _scored({"labeler": "soft_majority"})
    got = ttrl_metrics(scored, BATCH["gold"], None, m.counters, step_index=0)
    # a: trained 5, 5, 5 (share 5/6, right) -> gaps 1/6 each; b: 4, 3, 4 (2/6 right, 2/6 wrong, 2/6 right);
    # c: 6, 7, 6 (3/6 right, 2/6 wrong, 3/6 right)
    gaps = [1 / 6] * 3 + [4 / 6, 2 / 6, 4 / 6] + [3 / 6, 2 / 6, 3 / 6]
    assert got["reward_accuracy"] == pytest.approx(1 - sum(gaps) / 9)

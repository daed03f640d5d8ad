"""``RolloutRewards`` answers its own sizes: R, N, G and the rows that carry loss, from the rows it scores."""
import pytest
import torch

from ttrl_lightning.modules.step_records import RolloutRewards
from ttrl_lightning.rollout import Rollouts


def _rollouts(groups: int, n: int) -> Rollouts:
    R = groups * n
    one = torch.ones(R, 2, dtype=torch.long)
    return Rollouts(one, one, one, one, ["x"] * R, torch.arange(groups).repeat_interleave(n), n)


def test_sizes_and_kept_rows_by_hand():
    scored = RolloutRewards(rewards=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]),
                            group_mask=torch.tensor([True, False, True]),
                            row_mask=torch.tensor([True, False, True, True, True, False]),
                            rollouts=_rollouts(3, 2))
    assert (scored.num_rows, scored.group_size, scored.num_groups) == (6, 2, 3)
    assert scored.kept_groups().tolist() == [True, False, True]
    # group 1 abstains (rows 2, 3); rows 1 and 5 are dropped by the row mask
    assert scored.kept_rows().tolist() == [True, False, False, False, True, False]
    assert scored.by_group(scored.rewards).tolist() == [[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert scored.check(scored.num_rows, scored.num_groups) is scored


def test_sizes_need_the_scored_rows():
    with pytest.raises(ValueError, match="rollouts is not set"):
        RolloutRewards(rewards=torch.zeros(4)).num_groups

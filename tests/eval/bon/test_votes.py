"""Batched votes of the best-of-N protocol: VisConf's tie rule, against consensus.voting.weighted_vote."""
import torch

from ttrl_lightning.consensus.voting import weighted_vote
from ttrl_lightning.eval.bon.votes import first_positions, rwc_numerators, vote


def test_first_positions():
    cls = torch.tensor([[2, 0, 2, 1], [1, 1, 1, 1]])
    assert first_positions(cls, 4).tolist() == [[1, 3, 0, 4], [4, 0, 4, 4]]


def test_vote_tie_goes_to_the_earliest_supporting_rollout():
    cls = torch.tensor([[2, 0, 0, 2], [1, 3, 3, 1], [0, 1, 1, 1]])
    assert vote(cls, torch.ones_like(cls), 4).tolist() == [2, 1, 1]


def test_vote_matches_weighted_vote_on_random_cases():
    g = torch.Generator().manual_seed(0)
    cls = torch.randint(0, 3, (200, 5), generator=g)
    w = torch.randint(0, 3, (200, 5), generator=g)
    got = vote(cls, w, 3)
    for row in range(200):
        labels = [str(int(c)) for c in cls[row]]
        want, _ = weighted_vote(labels, w[row].double())
        assert str(int(got[row])) == want


def test_rwc_numerators_single_rollout():
    gt, eq = torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1, dtype=torch.long)
    assert rwc_numerators(gt, eq).tolist() == [[1], [1]]

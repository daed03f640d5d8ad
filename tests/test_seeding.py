"""derive_seed reproduces the seed numbers of every stream exactly as the training code drew them before."""
import pytest
import torch

from ttrl_lightning.seeding import derive_seed, derived_generator


@pytest.mark.parametrize("stream,stride", [("rollout", 997), ("feedback_dropout", 7919), ("shuffle", 1),
                                           ("bon_subsets", 1)])
def test_stream_numbers(stream, stride):
    for seed, step, rank in [(0, 0, 0), (3, 5, 1), (7, 1234, 3)]:
        assert derive_seed(seed, stream, step, rank) == seed * 1_000_003 + step * stride + rank
    a = torch.rand(3, generator=derived_generator(3, stream, 5, 1))
    b = torch.rand(3, generator=torch.Generator().manual_seed(3 * 1_000_003 + 5 * stride + 1))
    assert torch.equal(a, b)


def test_unknown_stream_is_named():
    with pytest.raises(KeyError, match="unknown seed stream 'typo'"):
        derive_seed(0, "typo")

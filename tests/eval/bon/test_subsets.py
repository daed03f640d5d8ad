"""Fixed subsets of the best-of-N protocol: ttrl_lightning.eval.bon.subsets."""
import pytest
import torch

from ttrl_lightning.eval.bon.subsets import draw_subsets, fixed_subsets


def test_subsets_are_fixed_sorted_and_without_replacement():
    a = draw_subsets(5, 32, 8, 100, torch.Generator().manual_seed(0))
    b = draw_subsets(5, 32, 8, 100, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (5, 100, 8)
    assert bool((a[..., 1:] > a[..., :-1]).all())
    full = draw_subsets(5, 32, 32, 100, torch.Generator().manual_seed(0))
    assert full.shape == (5, 1, 32)
    with pytest.raises(ValueError):
        draw_subsets(5, 32, 33, 10, torch.Generator())


@pytest.mark.parametrize("seed,n", [(0, 8), (3, 16), (12345, 1)])
def test_fixed_subsets_use_the_seed_of_the_budget(seed, n):
    """One generator per budget, seeded ``seed * 1_000_003 + N``, the views drawn from it in order."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + n)
    want0 = draw_subsets(4, 32, n, 7, gen)
    want1 = draw_subsets(4, 24, n, 7, gen)
    got0, got1 = fixed_subsets(4, (32, 24), n, 7, seed)
    assert torch.equal(got0, want0) and torch.equal(got1, want1)
    (alone,) = fixed_subsets(4, (32,), n, 7, seed)
    assert torch.equal(alone, want0)  # the original view does not depend on whether the reframed one is drawn

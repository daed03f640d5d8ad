"""Paired question-cluster bootstrap: ttrl_lightning.eval.bon.bootstrap."""
import pytest
import torch

from ttrl_lightning.eval.bon.bootstrap import paired_bootstrap


def test_paired_bootstrap_against_naive_loop():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(50, generator=g)
    b = torch.rand(50, generator=g)
    got = paired_bootstrap(a, b, replicates=500, seed=3)
    gen = torch.Generator().manual_seed(3)
    idx = torch.randint(0, 50, (500, 50), generator=gen)
    reps = sorted(float((a[i] - b[i]).mean()) for i in idx)
    assert got["diff"] == pytest.approx(float((a - b).mean()))
    assert got["lo"] == pytest.approx(float(torch.quantile(torch.tensor(reps, dtype=torch.float64), 0.025)))
    assert got["lo"] < got["diff"] < got["hi"]
    with pytest.raises(ValueError):
        paired_bootstrap(a, b[:3])
    with pytest.raises(ValueError):
        paired_bootstrap(torch.tensor([float("nan")]), torch.tensor([0.0]))


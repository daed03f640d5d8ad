"""Temperature scaling (``pseudo_labels.pixel.temperature``) against an independent optimiser and a known
temperature."""
import logging
import math

import pytest
import torch

from ttrl_lightning.pseudo_labels import fit_temperature

from tests.pseudo_labels.pixel._votes import temperature_scaled


# ----------------------------------------------------------------------------------------- temperature

def nll(confidences, correct, t):
    total = 0.0
    for p, y in zip(confidences, correct):
        p = min(max(p, 1e-6), 1 - 1e-6)
        q = temperature_scaled(p, t)
        total -= math.log(q) if y else math.log(1 - q)
    return total


def synthetic(t_true, n, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, generator=g, dtype=torch.float64) * 2.0  # true logits
    correct = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(z)).tolist()
    confidences = torch.sigmoid(z * t_true).tolist()  # an overconfident model: logits scaled by t_true
    return confidences, correct


def test_fit_temperature_matches_an_independent_optimiser():
    optimize = pytest.importorskip("scipy.optimize")
    conf, correct = synthetic(1.7, 400, seed=3)
    t = fit_temperature(conf, correct)
    res = optimize.minimize_scalar(lambda lt: nll(conf, correct, math.exp(lt)),
                                   bounds=(math.log(1e-2), math.log(1e2)), method="bounded",
                                   options={"xatol": 1e-10})
    assert t == pytest.approx(math.exp(res.x), rel=1e-5)
    assert nll(conf, correct, t) <= nll(conf, correct, math.exp(res.x)) + 1e-9
    grid = [math.exp(math.log(0.5) + k * (math.log(4) - math.log(0.5)) / 2000) for k in range(2001)]
    best = min(grid, key=lambda x: nll(conf, correct, x))
    assert t == pytest.approx(best, rel=2e-3)


@pytest.mark.parametrize("t_true", [0.6, 2.5])
def test_fit_temperature_recovers_a_known_temperature(t_true):
    conf, correct = synthetic(t_true, 20000, seed=11)
    assert fit_temperature(conf, correct) == pytest.approx(t_true, rel=0.05)


def test_fit_temperature_edges(caplog):
    assert fit_temperature([0.5, 0.5], [True, False]) == 1.0
    with caplog.at_level(logging.WARNING, logger="ttrl_lightning.pseudo_labels.pixel.labeler"):
        assert fit_temperature([0.9, 0.1], [True, False]) == 1e-2  # separable: T -> 0, clipped to the bound
    assert "T <= 0.01" in caplog.text
    with pytest.raises(ValueError, match="2 confidences but 1"):
        fit_temperature([0.9, 0.2], [True])
    with pytest.raises(ValueError, match=r"confidences\[1\] = 1.5"):
        fit_temperature([0.9, 1.5], [True, False])
    with pytest.raises(ValueError, match=r"correct\[0\] must be a bool"):
        fit_temperature([0.9], [2])

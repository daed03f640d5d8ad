import math

import numpy as np
import pytest
import torch

from ttrl_lightning.signals import (calibrate_confidence, lookback_score, min_length_score,
                                    self_certainty_score, token_signals, visconf_score)


def _naive_token(z_row, y):
    z = [float(v) for v in z_row]
    m = max(z)
    s = sum(math.exp(v - m) for v in z)
    lse = m + math.log(s)
    p = [math.exp(v - lse) for v in z]
    ent = -sum(pi * math.log(pi) for pi in p if pi > 0)
    sc = sum((1.0 / len(z)) * (math.log(1.0 / len(z)) - math.log(pi)) for pi in p)  # KL(U||p)
    return ent, sc, z[y] - lse


def test_token_signals_match_naive_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 13, generator=g) * 3
    ids = torch.randint(0, 13, (7,), generator=g)
    out = token_signals(logits, ids)
    for t in range(7):
        ent, sc, lp = _naive_token(logits[t], int(ids[t]))
        assert out["entropy"][t].item() == pytest.approx(ent, rel=1e-5, abs=1e-5)
        assert out["self_certainty"][t].item() == pytest.approx(sc, rel=1e-5, abs=1e-5)
        assert out["logprob"][t].item() == pytest.approx(lp, rel=1e-5, abs=1e-5)
    assert all(v.dtype == torch.float32 for v in out.values())


def test_token_signals_batched_equals_per_row():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 4, 11, generator=g)
    ids = torch.randint(0, 11, (3, 4), generator=g)
    out = token_signals(logits, ids)
    for r in range(3):
        row = token_signals(logits[r], ids[r])
        for k in out:
            assert torch.equal(out[k][r], row[k])


def test_token_signals_uniform_distribution_has_zero_self_certainty():
    out = token_signals(torch.zeros(3, 50), torch.tensor([0, 1, 2]))
    assert torch.allclose(out["self_certainty"], torch.zeros(3), atol=1e-6)
    assert torch.allclose(out["entropy"], torch.full((3,), math.log(50)), atol=1e-5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_token_signals_reject_non_finite(bad):
    z = torch.zeros(2, 5)
    z[1, 3] = bad
    with pytest.raises(ValueError, match="non-finite"):
        token_signals(z, torch.tensor([0, 1]))


def test_token_signals_reject_bad_ids_and_shapes():
    with pytest.raises(ValueError):
        token_signals(torch.zeros(2, 5), torch.tensor([0, 5]))
    with pytest.raises(ValueError):
        token_signals(torch.zeros(2, 5), torch.tensor([0]))
    with pytest.raises(ValueError):
        token_signals(torch.zeros(5), torch.tensor([0]))


def test_calibrate_confidence_matches_numpy_pooled_quantiles():
    rng = np.random.default_rng(1)
    vals = [rng.normal(size=n) for n in (5, 9, 1, 17)]
    out = calibrate_confidence([torch.tensor(v) for v in vals])
    pooled = np.concatenate(vals)
    lo, hi = np.quantile(pooled, 0.05), np.quantile(pooled, 0.95)
    for v, c in zip(vals, out):
        ref = np.clip((v - lo) / max(hi - lo, 1e-6), 0, 1)
        np.testing.assert_allclose(c.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_calibrate_confidence_constant_pool_uses_eps_guard():
    out = calibrate_confidence([torch.ones(4), torch.ones(3)], eps=1e-3)
    assert all(torch.equal(c, torch.zeros_like(c)) for c in out)


def test_calibrate_confidence_errors():
    with pytest.raises(ValueError):
        calibrate_confidence([])
    with pytest.raises(ValueError, match="empty"):
        calibrate_confidence([torch.ones(2), torch.tensor([])])
    with pytest.raises(ValueError, match="non-finite"):
        calibrate_confidence([torch.tensor([1.0, float("nan")])])


def test_lookback_score_hand_worked():
    lp = torch.tensor([-0.5, -2.0])
    a = torch.tensor([0.25, 1.0])
    alpha, lam = 0.5, 1.25
    w = [0.25 ** lam, 1.0]
    ref = (w[0] * (-0.5 + alpha * math.log(0.25)) + w[1] * (-2.0 + 0.0)) / (w[0] + w[1])
    assert lookback_score(lp, a, alpha, lam).item() == pytest.approx(ref, rel=1e-12)


def test_lookback_zero_attention_tokens_and_rollouts():
    # a zero-mass token carries no weight (0 log 0 = 0), so it cannot make the score NaN
    s = lookback_score(torch.tensor([-1.0, -3.0]), torch.tensor([0.5, 0.0]))
    assert s.item() == pytest.approx(-1.0 + 0.5 * math.log(0.5))
    assert lookback_score(torch.tensor([-1.0]), torch.tensor([0.0])).item() == float("-inf")
    with pytest.raises(ValueError):
        lookback_score(torch.tensor([-1.0]), torch.tensor([1.5]))


def test_visconf_and_alpha_rank_equivalence():
    v = [torch.tensor([0.2, 0.4]), torch.tensor([0.9, 0.1]), torch.tensor([0.3, 0.3])]
    c = [torch.tensor([1.0, 0.5]), torch.tensor([0.1, 0.2]), torch.tensor([0.7, 0.9])]
    z = torch.stack([visconf_score(vi, ci) for vi, ci in zip(v, c)])
    assert z[0].item() == pytest.approx(0.3 * 0.75)
    z_half = torch.stack([visconf_score(vi, ci, alpha=0.5) for vi, ci in zip(v, c)])
    assert torch.equal(torch.argsort(z), torch.argsort(z_half))
    assert torch.allclose(z_half, z.sqrt())


def test_self_certainty_and_min_length_scores():
    assert self_certainty_score(torch.tensor([1.0, 2.0, 6.0])).item() == pytest.approx(3.0)
    assert min_length_score(7).item() == -7.0
    with pytest.raises(ValueError):
        self_certainty_score(torch.tensor([]))

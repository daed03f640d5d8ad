"""Per-rollout scores of the best-of-N protocol against ttrl_lightning.signals, rollout by rollout."""
import pytest
import torch

from ttrl_lightning.data.simulate import simulate_pool
from ttrl_lightning.eval.bon.rollout_scores import rollout_scores
from ttrl_lightning.signals import lookback_score, self_certainty_score


def test_rollout_scores_match_the_public_signals():
    pool = simulate_pool(num_questions=3, rollouts=5, tokens=7, seed=4)
    got = rollout_scores(pool, alpha=0.5, lam=1.25)
    r0 = pool.num_rollouts_in_view(0)
    assert set(got) == {"K", "V", "L", "len"} and got["K"].shape == (3, r0)
    for q in range(3):
        for j in range(r0):
            n = int(pool.lengths[q, j])
            tok = {k: v[q, j, :n].double() for k, v in pool.signals.items()}
            want_k = float(self_certainty_score(tok["self_certainty"]))
            assert float(got["K"][q, j]) == pytest.approx(want_k, abs=1e-12)
            assert float(got["V"][q, j]) == pytest.approx(float(tok["visual_engagement"].mean()), abs=1e-12)
            want_l = float(lookback_score(tok["logprob"], tok["image_attention"], 0.5, 1.25))
            assert float(got["L"][q, j]) == pytest.approx(want_l, abs=1e-12)
            assert float(got["len"][q, j]) == n


def test_scores_only_for_present_signals_and_checks():
    pool = simulate_pool(num_questions=2, rollouts=4, tokens=4, seed=1)
    pool.signals.pop("logprob")
    assert set(rollout_scores(pool, 0.5, 1.25)) == {"K", "V", "len"}
    pool.signals["image_attention"] = pool.signals["image_attention"] + 2.0
    pool.signals["logprob"] = torch.zeros_like(pool.signals["self_certainty"])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        rollout_scores(pool, 0.5, 1.25)

"""The vectorised best-of-N protocol against the question-by-question reference (public API)."""
import json

import pytest
import torch

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.data.pool import RolloutPool
from ttrl_lightning.data.simulate import simulate_pool
from ttrl_lightning.eval.bon import (DEFAULT_METHODS, BoNConfig, SortedTokens, calibrated_confidence_means,
                                     draw_subsets, evaluate_pool, expand_methods)
from ttrl_lightning.eval.bootstrap import paired_bootstrap
from ttrl_lightning.eval.reference import evaluate_question
from ttrl_lightning.signals import calibrate_confidence


def _reference_accuracy(pool, cfg, methods=DEFAULT_METHODS):
    q = pool.num_questions
    r0, r1 = pool.num_rollouts_in_view(0), pool.num_rollouts_in_view(1)
    out = {}
    for n in cfg.ns:
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + n)
        idx = draw_subsets(q, r0, n, cfg.subsets, gen)
        idx1 = draw_subsets(q, r1, n, cfg.subsets, gen)
        for qi in range(q):
            rows = [evaluate_question(pool, qi, idx[qi, s].tolist(), idx1[qi, s].tolist(), methods, cfg)
                    for s in range(idx.shape[1])]
            for m in rows[0]:
                out.setdefault(m, {}).setdefault(n, []).append(sum(r[m] for r in rows) / len(rows))
    return out


@pytest.mark.parametrize("seed,tokens,strength", [(3, 12, 0.25), (7, 9, 2.0), (11, 5, 0.0)])
def test_vectorised_protocol_equals_per_question_reference(seed, tokens, strength):
    pool = simulate_pool(num_questions=9, rollouts=8, tokens=tokens, seed=seed, signal_strength=strength,
                         no_answer_rate=0.2)
    cfg = BoNConfig(ns=(1, 3, 8), subsets=4, seed=seed, chunk_questions=4)
    got = evaluate_pool(pool, DEFAULT_METHODS, cfg, progress=False)
    ref = _reference_accuracy(pool, cfg)
    assert set(got.per_question) == set(ref)
    for m, per_n in ref.items():
        for n, vals in per_n.items():
            assert torch.allclose(got.per_question[m][n], torch.tensor(vals, dtype=torch.float64), atol=1e-12), (m, n)


def test_ties_in_scores_and_votes_follow_the_reference():
    """Quantised signals make exact score ties and vote ties common; the tie rules must still agree."""
    pool = simulate_pool(num_questions=10, rollouts=6, tokens=6, seed=5, num_distractors=1)
    for k in list(pool.signals):
        pool.signals[k] = (pool.signals[k] * 2).round() / 2
    pool.signals["image_attention"] = pool.signals["image_attention"].clamp(0, 1)
    pool.signals["visual_engagement"] = pool.signals["visual_engagement"].clamp(0, 1)
    cfg = BoNConfig(ns=(2, 4, 6), subsets=5, seed=1)
    got = evaluate_pool(pool, DEFAULT_METHODS, cfg, progress=False)
    ref = _reference_accuracy(pool, cfg)
    for m, per_n in ref.items():
        for n, vals in per_n.items():
            assert torch.allclose(got.per_question[m][n], torch.tensor(vals, dtype=torch.float64), atol=1e-12), (m, n)


def test_calibration_means_match_torch_quantile_with_variable_lengths():
    g = torch.Generator().manual_seed(0)
    qc, r, t = 3, 7, 11
    tok = torch.randn(qc, r, t, generator=g).float()
    tok[0, 0, :5] = 1.0  # duplicated values
    lengths = torch.randint(1, t + 1, (qc, r), generator=g)
    idx = torch.stack([draw_subsets(1, r, 4, 6, g)[0] for _ in range(qc)])
    got = calibrated_confidence_means(SortedTokens.build(tok, lengths), idx, eps=1e-6)
    for q in range(qc):
        for s in range(idx.shape[1]):
            members = idx[q, s].tolist()
            cal = calibrate_confidence([tok[q, j, : int(lengths[q, j])] for j in members])
            ref = torch.stack([c.mean() for c in cal])
            assert torch.allclose(got[q, s], ref, atol=1e-12)


def test_subsets_are_fixed_sorted_and_without_replacement():
    a = draw_subsets(5, 32, 8, 100, torch.Generator().manual_seed(0))
    b = draw_subsets(5, 32, 8, 100, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (5, 100, 8)
    assert bool((a[..., 1:] > a[..., :-1]).all())
    full = draw_subsets(5, 32, 32, 100, torch.Generator().manual_seed(0))
    assert full.shape == (5, 1, 32)
    with pytest.raises(ValueError):
        draw_subsets(5, 32, 33, 10, torch.Generator())


def test_expected_regimes_on_simulated_pool():
    """On a pool with view-fragile wrong answers HMS beats majority; the oracle bounds everything."""
    pool = simulate_pool(num_questions=300, seed=2, wrong_view_stability=0.0)
    res = evaluate_pool(pool, ["first", "oracle", "majority", "hms", "visconf_rwc"],
                        BoNConfig(ns=(8, 32), subsets=20), progress=False).accuracy()
    for m in ("majority", "hms", "visconf_rwc", "first"):
        assert res[m]["32"] <= res["oracle"]["32"]
    assert res["hms"]["32"] > res["majority"]["32"]
    assert res["majority"]["32"] > res["first"]["32"]


def test_clear_errors_for_missing_signals_views_and_budgets():
    pool = simulate_pool(num_questions=4, rollouts=8, tokens=4, reframed=False)
    with pytest.raises(ValueError, match="reframed"):
        evaluate_pool(pool, ["hms"], BoNConfig(ns=(4,)), progress=False)
    with pytest.raises(ValueError, match="exceeds"):
        evaluate_pool(pool, ["majority"], BoNConfig(ns=(9,)), progress=False)
    pool.signals.pop("visual_engagement")
    with pytest.raises(ValueError, match="visual_engagement"):
        evaluate_pool(pool, ["visconf"], BoNConfig(ns=(4,)), progress=False)
    with pytest.raises(KeyError, match="known"):
        evaluate_pool(pool, ["no_such_method"], BoNConfig(ns=(4,)), progress=False)


def test_borda_expansion_names():
    plan = expand_methods(["self_certainty_borda", "self_certainty_borda_p1.5"], borda_p=(0.3, 1.2))
    assert [p[0] for p in plan] == ["self_certainty_borda_p0.3", "self_certainty_borda_p1.2",
                                    "self_certainty_borda_p1.5"]


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

"""The vectorised best-of-N protocol against the question-by-question reference (public API)."""
import pytest
import torch

from ttrl_lightning.data.simulate import simulate_pool
from ttrl_lightning.eval.bon.protocol import DEFAULT_METHODS, BoNConfig, evaluate_pool
from ttrl_lightning.eval.bon.oracle import evaluate_question
from ttrl_lightning.eval.bon.subsets import fixed_subsets


def _reference_accuracy(pool, cfg, methods=DEFAULT_METHODS):
    q = pool.num_questions
    r0, r1 = pool.num_rollouts_in_view(0), pool.num_rollouts_in_view(1)
    out = {}
    for n in cfg.ns:
        idx, idx1 = fixed_subsets(q, (r0, r1), n, cfg.subsets, cfg.seed)
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
        evaluate_pool(pool, ["visconf_top1"], BoNConfig(ns=(4,)), progress=False)
    with pytest.raises(KeyError, match="known"):
        evaluate_pool(pool, ["no_such_method"], BoNConfig(ns=(4,)), progress=False)
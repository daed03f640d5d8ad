"""`ttrl bon --auc` (eval/bon/auc.py): VisConf Table 6's within-question AUROC against Eq. 6 by hand, the
full-pool scores against the signals API, and the stratified interval."""
import json

import torch

from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import pool_to_records, write_records
from ttrl_lightning.data.simulate import SimulationConfig, simulate_pool
from ttrl_lightning.eval.bon.auc import (auc_table, format_auc_table, full_pool_scores, question_aucs,
                                     rollout_correct)
from ttrl_lightning.eval.bon.token_fusion import permuted_token_fusion_means
from ttrl_lightning.signals import calibrate_confidence


def _eq6(s, c):
    """VisConf Eq. 6: (1 / |C||I|) sum_{i in C, j in I} 1[s_i > s_j]."""
    pos = [x for x, y in zip(s, c) if y]
    neg = [x for x, y in zip(s, c) if not y]
    return sum(a > b for a in pos for b in neg) / (len(pos) * len(neg))


def test_question_auc_is_eq6_without_ties_and_skips_unmixed_questions():
    scores = torch.tensor([[0.9, 0.1, 0.5, 0.3], [1.0, 2.0, 3.0, 4.0], [0.2, 0.8, 0.4, 0.6]])
    correct = torch.tensor([[True, False, False, True], [True, True, True, True], [False, True, True, False]])
    got = question_aucs(scores, correct)
    assert got.tolist() == [_eq6(scores[0].tolist(), correct[0].tolist()),
                            _eq6(scores[2].tolist(), correct[2].tolist())]
    assert got.tolist() == [0.75, 0.75]  # by hand: q0 pairs (0.9>0.1, 0.9>0.5, 0.3>0.1, 0.3<0.5)


def test_full_pool_scores_follow_the_signals_api():
    pool = simulate_pool(SimulationConfig(num_questions=3, rollouts=5, tokens=10, seed=2))
    scores = full_pool_scores(pool)
    for q in range(3):
        n = pool.lengths[q].tolist()
        k = [pool.signals["self_certainty"][q, j, :n[j]].double() for j in range(5)]
        v = [pool.signals["visual_engagement"][q, j, :n[j]].double() for j in range(5)]
        c = calibrate_confidence(k)
        torch.testing.assert_close(scores["CV"][q], torch.stack([x.mean() * y.mean() for x, y in zip(c, v)]))
        torch.testing.assert_close(scores["cv_token"][q], torch.stack([(x * y).mean() for x, y in zip(c, v)]))
        torch.testing.assert_close(scores["kv_token"][q], torch.stack([(x * y).mean() for x, y in zip(k, v)]))
        torch.testing.assert_close(scores["KV"][q], torch.stack([x.mean() * y.mean() for x, y in zip(k, v)]))
        torch.testing.assert_close(scores["cov"][q], torch.stack([((x - x.mean()) * (y - y.mean())).mean()
                                                                  for x, y in zip(k, v)]))  # Eq. 3
    assert scores["kv_permuted"].shape == (3, 5, 100)


def test_permuted_token_fusion_permutes_valid_positions_only():
    """k one-hot at position 0: T_i * score = v at pi(0), a uniformly drawn valid position (never padding);
    and the mean over permutations tends to V K (App. D.2 Eq. 4)."""
    lengths = torch.tensor([[3, 5]])
    v = torch.tensor([[[0.1, 0.2, 0.3, 9.0, 9.0], [0.5, 0.6, 0.7, 0.8, 0.9]]])
    k = torch.zeros(1, 2, 5)
    k[..., 0] = 1.0
    got = permuted_token_fusion_means(k, v, lengths, permutations=400, seed=1)
    assert got.shape == (1, 2, 400)
    picked = (got * lengths[..., None]).round(decimals=6)
    for r in range(2):
        values = set(picked[0, r].tolist())
        assert values == set(v[0, r, :lengths[0, r]].double().round(decimals=6).tolist())
    k2 = torch.rand(1, 2, 5, generator=torch.Generator().manual_seed(0))
    mean = permuted_token_fusion_means(k2, v, lengths, permutations=4000, seed=2).mean(-1)
    want = torch.stack([k2[0, r, :n].double().mean() * v[0, r, :n].double().mean()
                        for r, n in enumerate(lengths[0].tolist())])
    torch.testing.assert_close(mean[0], want, atol=5e-3, rtol=0)


def test_question_auc_of_permuted_scores_is_the_mean_over_permutations():
    scores = torch.tensor([[[0.9, 0.1], [0.1, 0.2], [0.5, 0.7], [0.3, 0.8]]], dtype=torch.float64)
    correct = torch.tensor([[True, False, False, True]])
    want = sum(_eq6(scores[0, :, p].tolist(), correct[0].tolist()) for p in range(2)) / 2
    assert question_aucs(scores, correct).tolist() == [want]


def test_table_macro_averages_mixed_questions_of_every_pool(tmp_path, capsys):
    a = simulate_pool(SimulationConfig(num_questions=8, rollouts=6, tokens=8, seed=0))
    b = simulate_pool(SimulationConfig(num_questions=5, rollouts=6, tokens=8, seed=1, signal_strength=2.0))
    rows = {r["key"]: r for r in auc_table([a, b], replicates=200)}
    assert list(rows) == ["K", "V", "kv_token", "kv_permuted", "KV", "CV", "cov", "cv_token", "L", "neg_len"]
    per_q = [question_aucs(full_pool_scores(p)["V"], rollout_correct(p)) for p in (a, b)]
    assert rows["V"]["questions"] == sum(x.numel() for x in per_q)
    assert abs(rows["V"]["auc"] - float(torch.cat(per_q).mean())) < 1e-12
    assert rows["V"]["lo"] <= rows["V"]["auc"] <= rows["V"]["hi"]
    paths = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    for pool, path in zip((a, b), paths):
        write_records(pool_to_records(pool), path)
    out = str(tmp_path / "r.json")
    assert main(["bon", "--pool", *paths, "--n", "2", "6", "--subsets", "3", "--bootstrap", "200", "--auc",
                 "--methods", "majority", "visconf_rwc", "--out", out, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "VisConf Table 6" in printed and "Calibrated token fusion" in printed
    report = json.load(open(out))
    assert [r["auc"] for r in report["auc"]] == [r["auc"] for r in auc_table([a, b], replicates=200)]


def test_the_interval_resamples_questions_within_each_pool_and_none_without_bootstrap():
    a = simulate_pool(SimulationConfig(num_questions=8, rollouts=6, tokens=8, seed=0))
    b = simulate_pool(SimulationConfig(num_questions=5, rollouts=6, tokens=8, seed=1, signal_strength=2.0))
    row = next(r for r in auc_table([a, b], replicates=300, seed=5) if r["key"] == "V")
    strata = [question_aucs(full_pool_scores(p)["V"], rollout_correct(p)) for p in (a, b)]
    gen = torch.Generator().manual_seed(5)
    means = torch.zeros(300, dtype=torch.float64)  # naive: each pool's questions drawn within that pool
    total = sum(x.numel() for x in strata)
    for x in strata:
        means += x[torch.randint(0, x.numel(), (300, x.numel()), generator=gen)].sum(-1) / total
    lo, hi = torch.quantile(means, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    assert abs(row["lo"] - lo) < 1e-12 and abs(row["hi"] - hi) < 1e-12 and row["lo"] < row["hi"]
    rows = auc_table([a, b], replicates=0)
    assert all(r["lo"] is None and r["hi"] is None and r["auc"] is not None for r in rows)
    assert "[" not in format_auc_table(rows).split("\n")[2]  # no interval printed

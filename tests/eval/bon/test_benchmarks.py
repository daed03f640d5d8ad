"""Several pools (eval/bon/benchmarks.py): macro-averaged accuracy and the bootstrap stratified within pools."""
import json

import torch

from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import pool_to_records, write_records
from ttrl_lightning.data.simulate import SimulationConfig, simulate_pool
from ttrl_lightning.eval.bon.protocol import BoNConfig, evaluate_pool
from ttrl_lightning.eval.bon.bootstrap import paired_bootstrap
from ttrl_lightning.eval.bon.benchmarks import stratified_paired_bootstrap


def test_one_stratum_is_the_paired_bootstrap():
    gen = torch.Generator().manual_seed(0)
    t, c = torch.rand(37, generator=gen), torch.rand(37, generator=gen)
    assert stratified_paired_bootstrap([t], [c], 500, seed=4) == paired_bootstrap(t, c, 500, seed=4)


def test_strata_are_resampled_within_themselves_and_macro_averaged():
    # differences constant within each pool: every within-pool resample has the same mean, so the interval
    # collapses onto the macro average (0.5 + 0.1) / 2, whatever the pool sizes; pooling would weigh by size
    t = [torch.full((3,), 0.5, dtype=torch.float64), torch.full((50,), 0.1, dtype=torch.float64)]
    c = [torch.zeros(3), torch.zeros(50)]
    out = stratified_paired_bootstrap(t, c, 300, seed=1)
    assert abs(out["diff"] - 0.3) < 1e-12 and abs(out["lo"] - 0.3) < 1e-12 and abs(out["hi"] - 0.3) < 1e-12


def test_bon_on_several_pools_reports_their_macro_average(tmp_path, capsys):
    pools = [simulate_pool(SimulationConfig(num_questions=q, rollouts=4, tokens=6, seed=s))
             for q, s in ((6, 0), (3, 1))]
    paths = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.parquet")]
    for pool, path in zip(pools, paths):
        write_records(pool_to_records(pool), path)
    out = str(tmp_path / "r.json")
    assert main(["bon", "--pool", *paths, "--n", "2", "4", "--subsets", "4", "--bootstrap", "100",
                 "--methods", "majority", "visconf_top1", "visconf_rwc", "--out", out, "--no-progress"]) == 0
    assert "macro average over 2 pools" in capsys.readouterr().out
    report = json.load(open(out))
    cfg = BoNConfig(ns=(2, 4), subsets=4)
    results = [evaluate_pool(p, ["majority", "visconf_top1", "visconf_rwc"], cfg, progress=False) for p in pools]
    for m in ("majority", "visconf_rwc"):
        want = sum(r.accuracy()[m]["2"] for r in results) / 2
        assert abs(report["accuracy"][m]["2"] - want) < 1e-12
        assert report["per_pool"][paths[1]]["accuracy"][m]["4"] == results[1].accuracy()[m]["4"]
    boot = report["bootstrap"]["majority"]["2"]
    assert boot == stratified_paired_bootstrap([r.per_question["visconf_rwc"][2] for r in results],
                                               [r.per_question["majority"][2] for r in results], 100, seed=0)
    assert main(["bon", "--pool", paths[0], paths[0], "--out", out]) == 1
    assert "is given twice" in capsys.readouterr().err

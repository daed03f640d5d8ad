"""`ttrl bon` (ttrl_lightning/cli/bon.py): the JSON report holds the protocol's numbers, not just plausible
ones."""
import json
import os

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import load_pool
from ttrl_lightning.eval.bon import DEFAULT_METHODS, BoNConfig, evaluate_pool

ALL_METHODS = {"first", "oracle", "majority", "self_certainty", "self_certainty_borda_p1.2", "lookback",
               "lookback_rwc", "visconf", "visconf_rwc", "visconf_wc", "min_length", "hms",
               "dual_view_majority"}


def test_bon_report_matches_evaluate_pool(tmp_path, capsys):
    """Simulated pool -> parquet -> `ttrl bon`: every accuracy equals `evaluate_pool` run directly on the same
    pool and config, the bootstrap entries are the target minus each comparator, and the plot is written."""
    pool = str(tmp_path / "pool.jsonl")
    assert main(["pool", "simulate", "--out", pool, "--questions", "30", "--rollouts", "8",
                 "--tokens", "8"]) == 0
    pq = str(tmp_path / "pool.parquet")
    assert main(["pool", "convert", pool, pq]) == 0
    out = str(tmp_path / "r" / "report.json")
    rc = main(["bon", "--pool", pq, "--n", "4", "8", "--subsets", "5", "--seed", "3", "--borda-p", "1.2",
               "--bootstrap", "50", "--out", out, "--no-progress"])
    assert rc == 0
    report = json.load(open(out))
    acc = report["accuracy"]
    assert set(acc) >= ALL_METHODS and set(acc["visconf_rwc"]) == {"4", "8"}

    cfg = BoNConfig(ns=(4, 8), subsets=5, seed=3, borda_p=(1.2,))
    direct = evaluate_pool(load_pool(pq), list(DEFAULT_METHODS), cfg, progress=False)
    assert acc == direct.accuracy()  # JSON round-trips floats exactly
    assert report["num_questions"] == 30 and report["complete"] is True
    # bootstrap diffs: target (visconf_rwc) minus comparator, on the same per-question numbers
    for comp in ("majority", "first"):
        for n in ("4", "8"):
            ci = report["bootstrap"][comp][n]
            assert ci["diff"] == pytest.approx(acc["visconf_rwc"][n] - acc[comp][n], abs=1e-9)
            assert ci["lo"] <= ci["diff"] <= ci["hi"]
    assert os.path.getsize(os.path.splitext(out)[0] + ".png") > 1000
    printed = capsys.readouterr().out
    assert "visconf_rwc" in printed and "N=8" in printed
    assert f"{100 * acc['majority']['8']:.2f}" in printed  # the table prints the report's numbers


def test_bon_hand_computed_pool(tmp_path):
    """Three questions x 4 rollouts, N = 4 (the full pool, one subset). ``first`` is the accuracy of one
    rollout of the subset (the mean correctness): (2/4 + 1/4 + 3/4) / 3 = 1/2; majority 2/3; oracle 1."""
    answers = {"q1": ("1", "2 1 1 3"),   # majority right
               "q2": ("5", "5 6 6 7"),   # majority wrong
               "q3": ("4", "3 4 4 4")}   # majority right
    records = [{"id": q, "gold": gold, "rollouts": [{"answer": a} for a in seq.split()]}
               for q, (gold, seq) in answers.items()]
    pool = tmp_path / "hand.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "hand.json"
    assert main(["bon", "--pool", str(pool), "--methods", "first", "majority", "oracle", "--n", "4",
                 "--bootstrap", "0", "--out", str(out), "--no-progress"]) == 0
    acc = json.load(open(out))["accuracy"]
    expected = {"first": 0.5, "majority": 2 / 3, "oracle": 1.0}
    assert {m: v["4"] for m, v in acc.items()} == pytest.approx(expected)

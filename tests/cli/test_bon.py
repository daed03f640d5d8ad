import json
import os

from ttrl_lightning.cli import main


def test_pool_simulate_validate_and_bon_end_to_end(tmp_path, capsys):
    pool = str(tmp_path / "pool.jsonl")
    assert main(["pool", "simulate", "--out", pool, "--questions", "30", "--rollouts", "8", "--tokens", "8"]) == 0
    assert main(["pool", "validate", pool]) == 0
    pq = str(tmp_path / "pool.parquet")
    assert main(["pool", "convert", pool, pq]) == 0
    out = str(tmp_path / "r" / "report.json")
    rc = main(["bon", "--pool", pq, "--n", "4", "8", "--subsets", "5", "--borda-p", "1.2", "--bootstrap", "50",
               "--out", out, "--no-progress"])
    assert rc == 0
    report = json.load(open(out))
    acc = report["accuracy"]
    assert set(acc) >= {"first", "oracle", "majority", "self_certainty", "self_certainty_borda_p1.2", "lookback",
                        "lookback_rwc", "visconf", "visconf_rwc", "visconf_wc", "min_length", "hms",
                        "dual_view_majority"}
    assert all(0.0 <= v <= 1.0 for per_n in acc.values() for v in per_n.values())
    assert set(acc["visconf_rwc"]) == {"4", "8"}
    assert report["bootstrap"]["majority"]["overall"]["lo"] <= report["bootstrap"]["majority"]["overall"]["hi"]
    assert os.path.getsize(os.path.splitext(out)[0] + ".png") > 1000
    printed = capsys.readouterr().out
    assert "visconf_rwc" in printed and "N=8" in printed


def test_unknown_command_and_help(capsys):
    assert main(["nope"]) == 2
    assert main([]) == 0
    assert "bon" in capsys.readouterr().out

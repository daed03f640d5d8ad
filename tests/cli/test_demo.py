"""`ttrl demo` (ttrl_lightning/cli/demo.py): its configs are packaged, the TTRL demo runs end to end on a tiny
budget and writes the report the README describes, and the best-of-N part runs."""
import json
from pathlib import Path

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.demo import DEMO_LABELERS, REPORT_FIELDS, SFT_CONFIG, TTRL_CONFIG

ROOT = Path(__file__).resolve().parents[2]


def test_demo_configs_are_packaged():
    for name in (SFT_CONFIG, TTRL_CONFIG):
        assert Path(config_path(name)).read_bytes() == (ROOT / "configs" / name).read_bytes()


def test_demo_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ttrl demo")


@pytest.mark.slow  # ~40 s on 2 cores: a few SFT and TTRL steps per labeler, the full pipeline
def test_ttrl_demo_writes_the_report(tmp_path, capfd):
    out = tmp_path / "demo"
    rc = main(["demo", "--out", str(out), "--sft-steps", "5", "--ttrl-steps", "1", "--questions", "4", "--k", "2"])
    assert rc == 0
    report = json.loads((out / "ttrl_report.json").read_text())
    assert set(report["labelers"]) == set(DEMO_LABELERS)
    # it ran again under the portable kernels (cli.numerics), whatever this machine's own are
    assert report["settings"]["numerics"]["mode"] == "portable"
    assert report["settings"]["numerics"]["cpu_capability"] == "AVX2"
    assert report["settings"]["numerics"]["ATEN_CPU_CAPABILITY"] == "avx2"
    entries = report["labelers"].values()
    # one SFT checkpoint and one seeded evaluation: every labeler starts from the same accuracy
    assert len({e["accuracy_before"] for e in entries}) == 1
    for entry in entries:
        assert set(REPORT_FIELDS) <= set(entry) and entry["steps"] == 1
        for key in ("accuracy_before", "accuracy_after", "maj_accuracy_before", "maj_accuracy_after"):
            scaled = entry[key] * 8 if key.startswith("acc") else entry[key] * 4  # 4 questions x 2 samples
            assert 0 <= entry[key] <= 1 and abs(scaled - round(scaled)) < 1e-9, (key, entry[key])
        # one step of 4 questions with gold: each is counted once, labelled (by agreement) or abstained
        counts = entry["label_vs_majority"]
        assert sum(counts.values()) == 4
        assert entry["coverage"] == pytest.approx(1 - counts["abstained"] / 4)
        assert entry["accepted_per_1k"] == pytest.approx(1000 * entry["coverage"])
    assert (out / "ttrl_accuracy.png").stat().st_size > 0 and (out / "ttrl_kl.png").stat().st_size > 0
    printed = capfd.readouterr().out  # the portable child's output, on this process's terminal
    assert "avg@2 before -> after" in printed and "self_harmony" in printed


@pytest.mark.slow  # ~6 s on 2 cores (the demo's full protocol: 100 subsets, 2,000 bootstrap replicates)
def test_demo_best_of_n_part(tmp_path, capfd):
    out = tmp_path / "demo"
    assert main(["demo", "--part", "bon", "--pool-questions", "20", "--out", str(out)]) == 0
    report = json.loads((out / "bon_report.json").read_text())
    assert report["num_questions"] == 20 and set(report["accuracy"]["visconf_rwc"]) == {"8", "16", "32"}
    printed = capfd.readouterr().out
    assert "best-of-N on a synthetic pool" in printed and "visconf_rwc" in printed


def test_vlm_demo_configs_are_packaged():
    from ttrl_lightning.cli.demo_vlm import VLM_SFT_CONFIG, VLM_TTRL_CONFIG

    for name in (VLM_SFT_CONFIG, VLM_TTRL_CONFIG):
        assert Path(config_path(name)).read_bytes() == (ROOT / "configs" / name).read_bytes()


# ~45 s on 2 cores: 3 SFT steps, then 1 TTRL step per arm and seed on 8 questions per split, in this process
def test_vlm_demo_runs_every_step_and_reports_both_controls(tmp_path):
    from ttrl_lightning.cli.demo_vlm import VLM_CONTROLS
    from ttrl_lightning.cli.demo_vlm import plot_vlm_curves, run_vlm_demo, vlm_table
    from ttrl_lightning.data.questions import read_questions

    sizes = {"train": 8, "validation": 8, "calibration": 8}
    arms = ["majority", "visconf", *VLM_CONTROLS]
    report = run_vlm_demo(str(tmp_path), arms, 0, [0, 1], sft_steps=3, ttrl_steps=1, sizes=sizes)
    files = {name: read_questions(str(tmp_path / "questions" / name / "questions.jsonl")) for name in sizes}
    assert all(len(q) == 8 and all(len(x["images"]) == 1 for x in q) for q in files.values())
    ids = [x["id"] for q in files.values() for x in q]
    assert len(set(ids)) == 24 and all(i.startswith("tinted_object_colour-") for i in ids)
    assert list(report["arms"]) == arms
    for arm, entry in report["arms"].items():
        assert [r["seed"] for r in entry["runs"]] == [0, 1] and all(r["steps"] == 1 for r in entry["runs"])
        for r in entry["runs"]:
            assert r["curve"][0] == (0, report["before"]["validation"]["avg"])  # step 0: the SFT model
            for split in ("train", "validation"):
                assert abs(r["after"][split]["avg"] * 64 - round(r["after"][split]["avg"] * 64)) < 1e-9
        values = [r["after"]["validation"]["avg"] for r in entry["runs"]]
        assert entry["validation_avg_spread"] == pytest.approx(max(values) - min(values))
        assert entry["validation_avg_gain"] == pytest.approx(sum(values) / 2 - report["before"]["validation"]["avg"])
        if arm in VLM_CONTROLS:
            assert entry["label_accuracy"] is None and entry["coverage"] is None  # a coin or gold is no label
    table = vlm_table(report)
    assert all(arm in table for arm in arms) and "SFT model" in table
    plot_vlm_curves(report, str(tmp_path / "vlm_accuracy.png"))
    assert (tmp_path / "vlm_accuracy.png").stat().st_size > 0

"""`ttrl demo` (ttrl_lightning/cli/demo.py) is a study of a packaged config (`ttrl study`): its configs are
packaged, the VLM demo's config runs end to end on a tiny budget, and the best-of-N part runs."""
import json
import os
from pathlib import Path

import pytest
import yaml

from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.demo import DEMO_STUDIES

ROOT = Path(__file__).resolve().parents[2]


def test_demo_configs_are_packaged():
    from ttrl_lightning.study.spec import load_spec

    for study in DEMO_STUDIES.values():
        assert Path(config_path(study)).read_bytes() == (ROOT / "configs" / study).read_bytes()
        spec = load_spec(study)
        for name in (spec.start.config, spec.train.config):
            assert Path(config_path(name)).read_bytes() == (ROOT / "configs" / name).read_bytes()


def test_demo_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ttrl demo")


@pytest.mark.slow  # ~6 s on 2 cores (the demo's full protocol: 100 subsets, 2,000 bootstrap replicates)
def test_demo_best_of_n_part(tmp_path, capfd):
    out = tmp_path / "demo"
    assert main(["demo", "--part", "bon", "--pool-questions", "20", "--out", str(out)]) == 0
    report = json.loads((out / "bon_report.json").read_text())
    assert report["num_questions"] == 20 and set(report["accuracy"]["visconf_rwc"]) == {"8", "16", "32"}
    printed = capfd.readouterr().out
    assert "best-of-N on a synthetic pool" in printed and "visconf_rwc" in printed


# ~60 s on 2 cores: 3 SFT steps, then 1 TTRL step per arm and seed on 8 questions per split, in this process
def test_vlm_demo_study_runs_every_arm_with_images_and_reports_both_controls(tmp_path, capsys):
    spec = yaml.safe_load(open(config_path(DEMO_STUDIES["vlm"])))
    spec.update(out=str(tmp_path / "vlm"), numerics="native", seeds=[0, 1])
    spec["questions"]["splits"] = {"train": 8, "validation": 8, "calibration": 8}
    spec["start"]["steps"] = 3
    spec["train"]["steps"] = 1
    spec["evaluation"]["k"] = 2
    spec["arms"] = {"majority": {}, "visconf": {}, "random_reward": {}, "gold_reward": {}}
    path = tmp_path / "vlm.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["study", "--config", str(path)]) == 0
    from ttrl_lightning.data.questions import read_questions

    files = {name: read_questions(str(tmp_path / "vlm" / "questions" / name / "questions.jsonl"))
             for name in ("train", "validation", "calibration")}
    assert all(len(q) == 8 and all(len(x["images"]) == 1 for x in q) for q in files.values())
    ids = [x["id"] for q in files.values() for x in q]
    assert len(set(ids)) == 24 and all(i.startswith("tinted_object_colour-") for i in ids)
    record = json.loads((tmp_path / "vlm" / "study.json").read_text())
    assert len(record["runs"]) == 8
    for run in record["runs"].values():
        assert run["metrics"]["steps"] == 1 and set(run["eval"]) == {"train", "validation"}
        for e in run["eval"].values():  # per-question counts of k = 2 samples
            assert len(e["correct"]) == 8 and e["avg"] == pytest.approx(sum(e["correct"]) / 16)
        if run["arm"] in ("random_reward", "gold_reward"):
            assert run["metrics"]["label_accuracy"] is None  # a coin or gold is no label
    report = json.loads((tmp_path / "vlm" / "report.json").read_text())
    assert report["split"] == "validation" and set(report["references"]) == {"start", "random_reward"}
    assert "gold_share" in report["arms"]["majority"]
    printed = capsys.readouterr().out
    assert all(arm in printed for arm in spec["arms"]) and "differences in avg@2" in printed

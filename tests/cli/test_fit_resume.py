"""`ttrl fit --ckpt_path` (ttrl_lightning/cli/resume.py): a changed hyperparameter is refused unless
--allow_hparam_override is given, and then it is the one used (in the optimizer too); a missing, empty or
foreign checkpoint file is refused with one line naming it, before Lightning reads it."""
import os
import pickle
import re

import pytest
import torch

from ttrl_lightning.cli.checkpoint_io import StreamingCheckpointIO
from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.fit import make_cli
from ttrl_lightning.cli.resume import hparam_changes

#: a fast SFT run: no logger, validation, bar or summary
FAST = ["--config", config_path("sft/tiny_arith.yaml"), "--trainer.limit_val_batches=0",
        "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false"]


@pytest.fixture(scope="module")
def two_step_checkpoint(tmp_path_factory) -> str:
    """A checkpoint after 2 steps of the tiny SFT config (policy.lr 3e-3, w_act 2.0)."""
    root = tmp_path_factory.mktemp("first")
    assert main(["fit", *FAST, "--trainer.max_steps=2", f"--trainer.default_root_dir={root}"]) == 0
    path = root / "checkpoints" / "epoch=0-step=2.ckpt"
    assert path.is_file()
    return str(path)


def test_changed_hyperparameters_are_refused_naming_each(two_step_checkpoint, tmp_path, capsys):
    rc = main(["fit", *FAST, "--trainer.max_steps=3", f"--trainer.default_root_dir={tmp_path}",
               "--model.init_args.policy.lr=0.01", "--model.init_args.w_act=3",
               "--ckpt_path", two_step_checkpoint])
    err = capsys.readouterr().err
    assert rc == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"ttrl fit: checkpoint {two_step_checkpoint} was trained with other "
                           "hyperparameters")
    assert "policy.lr: checkpoint 0.003, this run 0.01" in line
    assert "w_act: checkpoint 2.0, this run 3.0" in line
    assert "--allow_hparam_override" in line and "Traceback" not in err
    assert not (tmp_path / "checkpoints").exists()  # refused before anything ran


def test_allowed_override_uses_the_new_values_in_the_optimizer(two_step_checkpoint, tmp_path, capsys):
    cli = make_cli(["fit", *FAST, "--trainer.max_steps=3", f"--trainer.default_root_dir={tmp_path}",
                    "--model.init_args.policy.lr=0.01", "--allow_hparam_override",
                    "--ckpt_path", two_step_checkpoint])
    assert "policy.lr: checkpoint 0.003, this run 0.01" in capsys.readouterr().err  # said, not silent
    assert cli.trainer.global_step == 3  # resumed at step 2, one more step
    assert cli.model.policy_spec.lr == 0.01
    # the restored optimizer state carried lr 0.003: the run's value replaces it
    assert [g["lr"] for g in cli.trainer.optimizers[0].param_groups] == [0.01]
    saved = torch.load(tmp_path / "checkpoints" / "epoch=0-step=3.ckpt", weights_only=True)
    assert saved["hyper_parameters"]["policy"]["lr"] == 0.01
    assert saved["optimizer_states"][0]["param_groups"][0]["lr"] == 0.01


def test_unchanged_hyperparameters_resume_quietly(two_step_checkpoint, tmp_path, capsys):
    cli = make_cli(["fit", *FAST, "--trainer.max_steps=3", f"--trainer.default_root_dir={tmp_path}",
                    "--ckpt_path", two_step_checkpoint])
    assert "instead of the checkpoint's" not in capsys.readouterr().err
    assert cli.trainer.global_step == 3
    # written by ttrl fit's streaming writer (tests/test_checkpoints_write.py) and resumed from
    assert isinstance(cli.trainer.strategy.checkpoint_io, StreamingCheckpointIO)
    assert [g["lr"] for g in cli.trainer.optimizers[0].param_groups] == [0.003]


def test_hparam_changes_compares_nested_fields():
    saved = {"class_path": "a.B", "policy": {"lr": 0.003, "betas": (0.9, 0.999)}, "w_act": 2.0, "old": 1}
    given = {"class_path": "a.B", "policy": {"lr": 0.003, "betas": [0.9, 0.999]}, "w_act": 2, "new": 1}
    assert hparam_changes(saved, given) == {}  # tuples vs YAML lists, 2 vs 2.0, keys only one side names
    given["policy"]["betas"] = [0.8, 0.999]
    given["class_path"] = "a.C"
    assert hparam_changes(saved, given) == {"class_path": ("a.B", "a.C"),
                                            "policy.betas": ([0.9, 0.999], [0.8, 0.999])}


def test_hparam_changes_compares_resolved_values_and_paths(tmp_path, monkeypatch):
    """The shipped TTRL configs were refused on resume by false mismatches: ``advantage.rule`` given as None
    is saved as the labeler's rule ("group"), and a relative and an absolute spelling of one ``policy.model``
    file are the same file. Real differences still count."""
    ckpt = tmp_path / "sft.ckpt"
    ckpt.write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    ttrl = "ttrl_lightning.modules.TTRLModule"
    saved = {"class_path": ttrl, "advantage": {"rule": "group"}, "policy": {"model": str(ckpt)}}
    given = {"class_path": ttrl, "advantage": {"rule": None}, "policy": {"model": "sft.ckpt"}}
    assert hparam_changes(saved, given) == {}
    pixel = {"class_path": ttrl, "advantage": {"rule": None}, "voting": {"labeler": "pixel"}}
    assert hparam_changes(saved, pixel) == {"advantage.rule": ("group", "ema_baseline")}
    other = tmp_path / "other.ckpt"
    other.write_bytes(b"y")
    assert hparam_changes(saved, {"class_path": ttrl, "policy": {"model": "other.ckpt"}}) == {
        "policy.model": (str(ckpt), "other.ckpt")}


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def _bad_checkpoints(tmp_path, good: str) -> dict[str, tuple[str, str]]:
    """name -> (path, expected message after 'checkpoint <path> ')"""
    out = {}
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    out["empty"] = (str(empty), r"is empty \(0 bytes\)")
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(bytes(range(256)) * 3)
    out["garbage"] = (str(garbage), r"is not a Lightning checkpoint \(not a complete torch\.save archive")
    data = open(good, "rb").read()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(data[: len(data) // 2])
    out["truncated"] = (str(truncated), r"is not a Lightning checkpoint \(not a complete torch\.save "
                                        r"archive: truncated")
    plain_pickle = tmp_path / "pickle.ckpt"
    plain_pickle.write_bytes(pickle.dumps({"state_dict": {}}))
    out["plain pickle"] = (str(plain_pickle), r"is not a Lightning checkpoint")
    runs_code = tmp_path / "code.ckpt"
    torch.save({"state_dict": {}, "x": _RunsCode()}, runs_code)
    out["code"] = (str(runs_code), r"is not a Lightning checkpoint \(it holds objects other than tensors "
                                   r"and plain data, which are not loaded: .*system")
    no_state = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, no_state)
    out["no state_dict"] = (str(no_state), r"is not a Lightning checkpoint \(no state_dict; it holds keys "
                                           r"\['weight'\]\)")
    out["missing"] = (str(tmp_path / "nope.ckpt"), r"does not exist")
    weights_only = tmp_path / "weights_only.ckpt"
    torch.save({"state_dict": torch.load(good, weights_only=True)["state_dict"]}, weights_only)
    out["no training state"] = (str(weights_only), r"has no training state to resume from \(no "
                                                   r"pytorch-lightning_version, epoch, global_step, loops\)")
    return out


def test_bad_checkpoint_files_are_refused_in_one_line(two_step_checkpoint, tmp_path, capsys):
    for name, (path, message) in _bad_checkpoints(tmp_path, two_step_checkpoint).items():
        rc = main(["fit", *FAST, "--trainer.max_steps=3", f"--trainer.default_root_dir={tmp_path / 'run'}",
                   "--ckpt_path", path])
        err = capsys.readouterr().err
        assert rc == 1, name
        assert re.fullmatch(rf"ttrl fit: checkpoint {re.escape(path)} {message}.*\n", err), (name, err)
    assert not (tmp_path / "run").exists()


def test_an_override_onto_another_architecture_is_one_line(two_step_checkpoint, tmp_path, capsys):
    """--allow_hparam_override with a model of another architecture printed 64 lines of mismatched tensors."""
    rc = main(["fit", *FAST, "--trainer.max_steps=3", f"--trainer.default_root_dir={tmp_path / 'run'}",
               "--model.init_args.policy.model=tiny:llama", "--allow_hparam_override", "--ckpt_path",
               two_step_checkpoint])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("ttrl fit: the checkpoint's weights do not fit the model this run builds ("), err
    assert "Traceback" not in "\n".join(err)


def test_a_checkpoint_whose_hyperparameters_are_not_a_mapping_is_one_line(two_step_checkpoint, tmp_path, capsys):
    """hyper_parameters saved as a string was a traceback (dict() of a str) before anything was resumed."""
    checkpoint = torch.load(two_step_checkpoint, weights_only=False)
    checkpoint["hyper_parameters"] = "lr=0.1"
    path = str(tmp_path / "odd.ckpt")
    torch.save(checkpoint, path)
    rc = main(["fit", *FAST, "--trainer.max_steps=3", f"--trainer.default_root_dir={tmp_path / 'run'}",
               "--ckpt_path", path])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("ttrl fit: checkpoint ") and "odd.ckpt is not a Lightning checkpoint (its " \
        "hyper_parameters is a str, not a mapping)" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err

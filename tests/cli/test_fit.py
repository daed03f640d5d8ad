"""`ttrl fit|validate` (ttrl_lightning/cli/fit.py): a quiet command that says where its run went."""
import os
import re
import subprocess
import sys

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path

#: third-party start-up noise that must not reach the user (issue: a quiet main command)
NOISE = (
    "💡 Tip",                          # Lightning's litlogger / litmodels adverts
    "litlogger",
    "litmodels",
    "args parameter is intended",      # LightningCLI: both `args` and `sys.argv` given
    "anonymous setting has no effect",  # W&B, from WandbLogger's anonymous=None
    "LeafSpec",                        # torch pytree deprecation inside Lightning
    "git root",                        # W&B, when its folder does not exist yet
    "\x1b[",                           # terminal codes while the output is not a terminal
)


@pytest.mark.subprocess
def test_tiny_sft_fit_is_quiet_and_says_where_the_run_went(tmp_path):
    """The tiny SFT config, 2 steps, run as `python -m ttrl_lightning.cli fit` with the output captured (not a
    terminal): none of the noise, the checkpoint and the config land under the config's default_root_dir, one
    run folder each, and the last lines name them."""
    cmd = [sys.executable, "-m", "ttrl_lightning.cli", "fit", "--config", config_path("sft/tiny_arith.yaml"),
           "--trainer.max_steps=2", "--trainer.limit_val_batches=1", "--trainer.default_root_dir=runs/sft"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    for var in ("WANDB_SILENT", "WANDB_QUIET", "FORCE_COLOR", "PYTHONWARNINGS"):
        env.pop(var, None)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 0, printed[-4000:]
    for noise in NOISE:
        assert noise not in printed, (noise, printed[-4000:])

    ckpt = re.search(r"^checkpoint: (\S.*)$", proc.stdout, re.M).group(1)
    config = re.search(r"^config: +(\S.*)$", proc.stdout, re.M).group(1)
    assert (tmp_path / ckpt).is_file() and ckpt.endswith(".ckpt")
    run = os.path.dirname(os.path.dirname(ckpt))  # <root>/<project>/<run id>/checkpoints/<file>
    assert run.startswith(os.path.join("runs", "sft") + os.sep)
    assert config == os.path.join(run, "config.yaml") and (tmp_path / config).is_file()
    assert "w_act: 2.0" in (tmp_path / config).read_text()
    assert not (tmp_path / "outputs").exists()  # nothing in a shared outputs/ (config.yaml used to be there)


def test_the_quiet_filters_drop_their_messages_and_nothing_else():
    """``quiet.install`` drops Lightning's manual-optimization ModelCheckpoint advice (module doc: the state it
    offers to save would resume wrongly) and the torch pytree deprecation; another warning still shows."""
    import warnings

    from lightning.pytorch.utilities import rank_zero_warn

    from ttrl_lightning.cli import quiet

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet.install()
        rank_zero_warn("Using ModelCheckpoint with manual optimization and every_n_train_steps, but no "
                       "pre-optimization state was saved. The checkpoint will contain the model state AFTER")
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning)
        rank_zero_warn("Using ModelCheckpoint with something else")
    assert [str(w.message) for w in shown] == ["Using ModelCheckpoint with something else"]


def test_fit_help_starts_with_usage(capsys, recwarn):
    """`ttrl fit --help` from Python (sys.argv holds other arguments) prints usage with no warning first."""
    with pytest.raises(SystemExit) as e:
        main(["fit", "--help"])
    assert e.value.code in (0, None)
    assert capsys.readouterr().out.startswith("usage: ttrl [options] fit")
    assert not [w for w in recwarn if "sys.argv" in str(w.message)]


def test_loggers_without_save_dir_follow_default_root_dir():
    """A logger the config names without a save_dir (the fast GRPO config's CSVLogger) writes under
    trainer.default_root_dir, also when the command line overrides it (`ttrl demo` does); an explicit
    save_dir is kept."""
    from ttrl_lightning.cli.fit import parse_config

    grpo = ["--config", config_path("rft/tiny_grpo_fast.yaml")]
    cfg = parse_config(grpo)
    assert cfg.trainer.logger.class_path.endswith("CSVLogger")
    assert cfg.trainer.logger.init_args.save_dir == cfg.trainer.default_root_dir == "outputs/rft_fast"
    assert parse_config([*grpo, "--trainer.default_root_dir=demo/grpo"]).trainer.logger.init_args.save_dir \
        == "demo/grpo"
    assert parse_config([*grpo, "--trainer.logger.save_dir=mine"]).trainer.logger.init_args.save_dir == "mine"
    sft = parse_config(["--config", config_path("sft/tiny_arith.yaml"), "--trainer.logger=CSVLogger"])
    assert sft.trainer.logger.init_args.save_dir == "outputs/sft_tiny"


def test_command_line_is_restored():
    from ttrl_lightning.cli.fit import _command_line

    before = list(sys.argv)
    with _command_line(["fit", "--config", "x.yaml"]):
        assert sys.argv[1:] == ["fit", "--config", "x.yaml"] and sys.argv[0] == before[0]
    assert sys.argv == before


def test_a_second_run_into_the_same_folder_keeps_the_first_runs_config(tmp_path, monkeypatch, capsys):
    """Without a logger the run folder is default_root_dir: a second fit there overwrote the first run's
    config.yaml, leaving its checkpoint beside a config of another run. The second gets config-v1.yaml."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "run"
    common = ["fit", "--config", config_path("rft/tiny_grpo_fast.yaml"), "--trainer.logger=false",
              "--trainer.max_steps=1", f"--trainer.default_root_dir={root}"]
    assert main([*common, "--model.init_args.policy.lr=0.001"]) == 0
    assert main([*common, "--model.init_args.policy.lr=0.002"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.001" in (root / "config.yaml").read_text()
    assert "lr: 0.002" in (root / "config-v1.yaml").read_text()
    assert f"config:     {root / 'config-v1.yaml'}" in out

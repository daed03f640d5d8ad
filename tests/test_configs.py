"""Every YAML under configs/ parses with the `ttrl fit` CLI; sweeps call `ttrl fit` with valid keys."""
from pathlib import Path

import pytest
import yaml

from ttrl_lightning.cli.fit import make_cli, parse_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))
BASE = ROOT / "configs" / "sft" / "tiny_arith.yaml"


def test_configs_exist():
    names = {p.relative_to(ROOT / "configs").as_posix() for p in CONFIGS}
    assert {"sft/tiny_arith.yaml", "rft/tiny_grpo.yaml", "scale/ddp.yaml", "scale/fsdp.yaml"} <= names
    assert any(n.startswith("sweeps/") for n in names)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT / "configs").as_posix())
def test_config_parses(path):
    raw = yaml.safe_load(path.read_text())
    if path.parent.name == "study":  # a study spec, not a `ttrl fit` config: its own reader checks it
        from ttrl_lightning.study.spec import load_spec

        assert path.read_text().startswith("#"), "each config starts with a comment saying how to run it"
        spec = load_spec(str(path))
        for name in (spec.train.config, spec.start.config):
            if name:
                parse_config(["--config", str(ROOT / "configs" / name)])
        return
    if path.parent.name == "sweeps" and raw["command"][:2] == ["ttrl", "study"]:  # trials are arms of a study
        from ttrl_lightning.study.runner import parse_only
        from ttrl_lightning.study.spec import load_spec

        cmd = raw["command"]
        spec = load_spec(str(ROOT / cmd[cmd.index("--config") + 1]))
        assert "${args}" in cmd and "--resume" in cmd
        assert parse_only(spec, raw["parameters"]["only"]["values"]) is not None
        return
    if path.parent.name == "sweeps":
        cmd = raw["command"]
        assert cmd[:2] == ["ttrl", "fit"] and "${args}" in cmd
        config = ROOT / cmd[cmd.index("--config") + 1]
        overrides = [f"--{k}={v['values'][0]}" for k, v in raw["parameters"].items()]
        cfg = parse_config(["--config", str(config), *overrides])
        for k, v in raw["parameters"].items():
            assert cfg[k] == v["values"][0]
        return
    assert path.read_text().startswith("#"), "each config starts with a comment saying how to run it"
    args = ["--config", str(path)] if "model" in raw else ["--config", str(BASE), "--config", str(path)]
    cfg = parse_config(args)  # parse-only: no LightningCLI args/sys.argv warning
    assert cfg.model.class_path.startswith("ttrl_lightning.")
    assert "${" not in str(cfg.as_dict())  # interpolations resolved


def test_print_config_runs(capsys):
    with pytest.raises(SystemExit) as e:
        make_cli(["fit", "--config", str(BASE), "--print_config"])
    assert e.value.code in (0, None)
    out = capsys.readouterr().out
    assert "SFTModule" in out and "w_act: 2.0" in out
    assert "policy:\n      model: tiny:qwen2" in out and "lr: 0.003" in out  # the PolicySpec group


def test_rewards_by_name_and_by_class_path():
    from ttrl_lightning.rewards.simple import DigitsOnly, ExactAnswer

    cli = make_cli(["--config", str(ROOT / "configs" / "rft" / "tiny_grpo.yaml"), "--trainer.logger=false"],
                   run=False)
    fns = cli.model.reward_fns
    assert isinstance(fns[0], ExactAnswer) and fns[0].column == "gold" and isinstance(fns[1], DigitsOnly)
    assert cli.model.reward_weights.tolist() == pytest.approx([1.0, 0.1])


def test_defaults_offline_wandb_and_rich_bar(monkeypatch):
    import os

    from lightning.pytorch.callbacks import RichProgressBar
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.delenv("WANDB_MODE", raising=False)
    cli = make_cli(["--config", str(BASE)], run=False)
    assert os.environ["WANDB_MODE"] == "offline"
    assert isinstance(cli.trainer.logger, WandbLogger) and cli.trainer.logger._offline
    assert any(isinstance(c, RichProgressBar) for c in cli.trainer.callbacks)


def test_ttrl_fit_and_validate_commands(tmp_path, monkeypatch):
    """`ttrl fit` / `ttrl validate` through the project's dispatcher, on the fast GRPO config."""
    import csv
    import math

    from ttrl_lightning.cli import main

    monkeypatch.chdir(tmp_path)
    cfg = ROOT / "configs" / "rft" / "tiny_grpo_fast.yaml"
    assert main(["fit", "--config", str(cfg), "--trainer.enable_progress_bar=false"]) == 0
    rows = [r for r in csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))) if r.get("pid/beta")]
    assert len(rows) == 4
    # beta_t by hand from the logged KL observations k_t (Pixelis appendix 6.1 gains, the PIDKLController
    # defaults of the config: form "log", target 0.15, Kp 0.30, Ki 0.05, Kd 0.10, EMA 0.9, beta_0 = kl_coef =
    # 0.1, warm-up 1 step): u_t = u_{t-1} + Kp (e_t - e_{t-1}) + Ki_t e_t + Kd_t (D_t - D_{t-1}) with the
    # relative error e_t = s_t / 0.15 - 1, D_t = e_t - e_{t-1} (D_0 = 0, e_{-1} = D_{-1} = 0), and
    # Ki_t = Kd_t = 0 in the warm-up step t = 0
    smoothed, beta_prev, u = None, 0.1, math.log(0.1)
    e_prev, d_prev = None, 0.0
    for t, r in enumerate(rows):
        k = float(r["train/kl"])
        smoothed = k if smoothed is None else 0.9 * smoothed + 0.1 * k
        error = smoothed / 0.15 - 1
        d = 0.0 if e_prev is None else error - e_prev
        ki, kd = (0.0, 0.0) if t < 1 else (0.05, 0.10)
        u = min(max(u + 0.30 * (error - (e_prev or 0.0)) + ki * error + kd * (d - d_prev), math.log(1e-3)),
                math.log(100.0))
        e_prev, d_prev = error, d
        beta = math.exp(u)
        assert float(r["train/beta"]) == pytest.approx(beta_prev, rel=1e-6)  # step t's loss used beta_{t-1}
        assert float(r["pid/beta"]) == pytest.approx(beta, rel=1e-6)
        assert float(r["pid/kl_smoothed"]) == pytest.approx(smoothed, rel=1e-6, abs=1e-12)
        beta_prev = beta
    assert main(["validate", "--config", str(cfg), "--trainer.enable_progress_bar=false"]) == 0


def test_visconf_qwen2_5_vl_recipe_runs_one_step_on_a_tiny_qwen2_5_vl(tmp_path, monkeypatch):
    """The GPU recipe through the same YAML on a CPU: a tiny, randomly initialised Qwen2.5-VL (built from its
    transformers config class) trains one step on generated image questions with visconf's V * C votes."""
    import csv

    from ttrl_lightning.cli import main
    from ttrl_lightning.generate.scene_questions import write_scene_questions
    from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS

    monkeypatch.chdir(tmp_path)
    data = write_scene_questions(str(tmp_path / "scenes"), 4, seed=5, kinds=["colour", "shape"])
    signals = []
    labeler = PSEUDO_LABELERS["visconf"]

    def spy(votes, **kw):
        label = labeler(votes, **kw)
        signals.append(label.info["signal"])
        return label

    monkeypatch.setitem(PSEUDO_LABELERS._items, "visconf", spy)
    cfg = ROOT / "configs" / "ttrl" / "visconf_qwen2.5_vl_3b.yaml"
    assert main(["fit", "--config", str(cfg), "--model.init_args.policy.model", "tiny:qwen2_5_vl",
                 "--model.init_args.policy.dtype", "float32", "--data.init_args.path", data,
                 "--trainer.accelerator", "cpu", "--trainer.precision", "32-true", "--trainer.max_steps", "1",
                 "--model.init_args.sampling.max_new_tokens", "8", "--trainer.enable_progress_bar=false",
                 "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "logs"]) == 0
    assert signals == ["visconf"] * 4  # every question of the step scored by Z = V * C
    rows = list(csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))))
    assert any(r.get("train/completion_len") for r in rows)


def test_agent_pixel_recipe_calibrates_on_its_dev_cal_split(tmp_path, monkeypatch):
    """configs/ttrl/tiny_agent_pixel.yaml fits pixel's calibration (temperature, conformal threshold) on a
    labelled dev-cal split of the generated visual tasks before training: the recipe through the YAML, one
    step of a tiny agent at smoke size."""
    pytest.importorskip("cv2")
    monkeypatch.chdir(tmp_path)
    cfg = ROOT / "configs" / "ttrl" / "tiny_agent_pixel.yaml"
    raw = yaml.safe_load(cfg.read_text())
    assert raw["data"]["init_args"]["n_calibration"] > 0 and raw["model"]["init_args"].get("calibrate", True)
    cli = make_cli(["--config", str(cfg), "--model.init_args.policy.model", "tiny:qwen2",
                    "--model.init_args.policy.tiny_kwargs", "{max_pos: 1024}",
                    "--model.init_args.voting.num_votes", "2", "--model.init_args.voting.num_trained", "1",
                    "--model.init_args.engine", "{name: agent, max_steps: 1, max_turn_tokens: 8}",
                    "--data.init_args.n_train", "2", "--data.init_args.n_val", "1",
                    "--data.init_args.batch_size", "2", "--data.init_args.n_calibration", "2",
                    "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
                    "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                    "--trainer.enable_progress_bar", "false"], run=False)
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step >= 1
    assert cli.model.calibration["num_questions"] == 2
    assert set(cli.model.calibration["options"]) == {"temperature", "conformal_qhat"}

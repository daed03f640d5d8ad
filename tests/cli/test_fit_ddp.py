"""DDP on CPU (gloo, 2 processes): GRPO with EMA anchor and PID controller; both ranks end identical.

The reward alternates within each group (tests/cli/ddp_rewards.py), so every update moves the policy whatever
the CPU's float kernels make of the tiny model's samples: with a task reward the tiny random model may score 0
everywhere, train nothing and observe a KL of 0.0 on both ranks, which says nothing about the all-reduce."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.subprocess
def test_ddp_two_ranks_stay_identical(tmp_path):
    cfg = {
        "seed_everything": 0,
        "model": {"class_path": "ttrl_lightning.modules.GRPOModule",
                  "init_args": {"policy": {"model": "tiny:qwen2", "lr": 1e-2}, "num_generations": 2,
                                "rewards": [{"class_path": "tests.cli.ddp_rewards.AlternatingReward"}],
                                "sampling": {"max_new_tokens": 4},
                                "grpo": {"kl_coef": 0.1, "reference": "external", "num_iterations": 2}}},
        "data": {"class_path": "ttrl_lightning.data.datamodules.PromptDataModule",
                 "init_args": {"n_train": 16, "batch_size": 2}},
        "trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp", "max_steps": 4, "logger": False,
                    "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False,
                    "num_sanity_val_steps": 0, "limit_val_batches": 0, "default_root_dir": str(tmp_path),
                    "callbacks": [
                        {"class_path": "ttrl_lightning.callbacks.EMAAnchor", "init_args": {"rho": 0.9}},
                        {"class_path": "ttrl_lightning.callbacks.PIDKLController", "init_args": {"warmup_steps": 1}},
                        {"class_path": "ttrl_lightning.callbacks.RankStateDump",
                         "init_args": {"dirpath": str(tmp_path / "dump")}}]},
    }
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run([sys.executable, "-m", "ttrl_lightning.cli", "fit", "--config", str(path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0 = torch.load(tmp_path / "dump" / "rank0.pt", weights_only=False)
    r1 = torch.load(tmp_path / "dump" / "rank1.pt", weights_only=False)
    assert r0["global_step"] == r1["global_step"] == 4
    for part in ("policy", "ema"):
        for k in r0[part]:
            assert torch.equal(r0[part][k], r1[part][k]), (part, k)
    assert r0["pid"] == r1["pid"] and r0["kl_coef"] == r1["kl_coef"]
    assert r0["pid"]["step"] == 2  # one update per batch, 2 optimizer steps (num_iterations) each
    # the ranks saw different prompts and samples (DistributedSampler + rank-dependent seeds) and the policy
    # moved, so their local KL observations are positive and differ; the controller used the all-reduced mean
    assert r0["pid_kl"]["local"] > 0 and r1["pid_kl"]["local"] > 0
    assert r0["pid_kl"]["local"] != r1["pid_kl"]["local"]
    mean = (r0["pid_kl"]["local"] + r1["pid_kl"]["local"]) / 2
    assert abs(r0["pid_kl"]["reduced"] - mean) < 1e-6 and r0["pid_kl"]["reduced"] == r1["pid_kl"]["reduced"]
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in proc.stderr + proc.stdout

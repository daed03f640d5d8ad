"""EMAAnchor under FSDP2 (Lightning's ModelParallelStrategy) on 2 CPU ranks (gloo).

The acceptance command, `ttrl fit --config configs/rft/tiny_grpo.yaml --config configs/scale/fsdp_cpu.yaml`
(a few steps), runs with ``FullStateProbe`` below in each rank. Checked: the EMA is sharded (each rank holds
about half of it); both ranks end with identical full weights and EMA; the sharded EMA equals an unsharded
EMA e <- rho e + (1 - rho) m replayed on the full tensors of the same policy trajectory; the EMA shards are
in the distributed checkpoint folder and read back exactly (and through a full-state entry); a run resumed
from a mid-epoch checkpoint ends like the uninterrupted one (slow).
"""
import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from transformers.distributed.fsdp import is_fsdp_managed_module

from ttrl_lightning.callbacks import EMAAnchor
from ttrl_lightning.modules.fsdp import (
    checkpoint_entry,
    full_state_dict,
    local_tensor,
    restore_checkpoint_entry,
)

ROOT = Path(__file__).resolve().parents[2]
RHO = 0.9


class FullStateProbe(pl.Callback):
    """Runs inside each rank: replays an unsharded EMA on the gathered full policy after every batch and, at
    the end of fit, writes ``<dirpath>/rank<r>.pt`` with full weights, EMA, replay and reload checks."""

    def __init__(self, dirpath: str):
        self.dirpath = dirpath

    @staticmethod
    def _anchor(trainer) -> EMAAnchor:
        return next(c for c in trainer.callbacks if isinstance(c, EMAAnchor))

    def on_train_start(self, trainer, pl_module):
        self.start = full_state_dict(self._anchor(trainer).ema_model)
        self.replay = {k: v.clone() for k, v in self.start.items()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        policy = full_state_dict(pl_module.policy)
        with torch.no_grad():
            for k, e in self.replay.items():
                if e.is_floating_point():
                    e.mul_(RHO).add_(policy[k].to(e.dtype), alpha=1 - RHO)
                else:
                    e.copy_(policy[k])

    def on_fit_end(self, trainer, pl_module):
        anchor = self._anchor(trainer)
        ema = anchor.ema_model
        out = {"global_step": trainer.global_step, "policy": full_state_dict(pl_module.policy),
               "ema": full_state_dict(ema), "replay": self.replay, "start": self.start,
               "ema_is_reference": pl_module.reference_model is ema,
               "generate_synced": is_fsdp_managed_module(pl_module.policy) and is_fsdp_managed_module(ema),
               "ema_local_numel": sum(local_tensor(p).numel() for p in ema.parameters()),
               "ema_numel": sum(p.numel() for p in ema.parameters())}
        ckpt = Path(trainer.checkpoint_callback.best_model_path)
        if ckpt.is_dir():  # the last checkpoint holds the final EMA: wipe the shards, read them back
            entry = torch.load(ckpt / "meta.pt", weights_only=False)["callbacks"]["EMAAnchor"]["sharded_ema"]
            self._wipe(ema)
            restore_checkpoint_entry(ema, entry, ckpt)
            out["ema_reloaded"] = full_state_dict(ema)
        entry = checkpoint_entry(ema, {"state_dict": {}}, "ema")  # a full-file checkpoint's entry
        self._wipe(ema)
        restore_checkpoint_entry(ema, entry, None)
        out["ema_reloaded_full"] = full_state_dict(ema)
        os.makedirs(self.dirpath, exist_ok=True)
        torch.save(out, os.path.join(self.dirpath, f"rank{trainer.global_rank}.pt"))

    @staticmethod
    @torch.no_grad()
    def _wipe(module):
        for t in module.state_dict().values():
            local_tensor(t).zero_()


def _fit(tmp: Path, name: str, ckpt_path: str | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """The acceptance command with a small override: 4 steps, one epoch of 4 batches per rank, a distributed
    checkpoint every 2 steps (step 2 is mid-epoch)."""
    run = tmp / name
    override = {
        "data": {"init_args": {"n_train": 32}},
        "trainer": {"max_steps": 4, "logger": False, "enable_progress_bar": False,
                    "enable_model_summary": False, "num_sanity_val_steps": 0, "limit_val_batches": 0,
                    "default_root_dir": str(run),
                    "callbacks": [
                        {"class_path": "ttrl_lightning.callbacks.EMAAnchor", "init_args": {"rho": RHO}},
                        {"class_path": "ttrl_lightning.callbacks.PIDKLController",
                         "init_args": {"warmup_steps": 1}},
                        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                         "init_args": {"dirpath": str(run / "ckpt"), "every_n_train_steps": 2,
                                       "save_top_k": -1}},
                        {"class_path": "tests.callbacks.test_ema_fsdp.FullStateProbe",
                         "init_args": {"dirpath": str(run / "dump")}}]},
    }
    run.mkdir(parents=True)
    (run / "override.yaml").write_text(yaml.safe_dump(override))
    cmd = [sys.executable, "-m", "ttrl_lightning.cli", "fit",
           "--config", str(ROOT / "configs/rft/tiny_grpo.yaml"),
           "--config", str(ROOT / "configs/scale/fsdp_cpu.yaml"),
           "--config", str(run / "override.yaml")]
    if ckpt_path:
        cmd.append(f"--ckpt_path={ckpt_path}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=run, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc, run


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    return _fit(tmp_path_factory.mktemp("ema_fsdp"), "full")


def _load(run: Path):
    return [torch.load(run / "dump" / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def _same(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), what
    for k in a:
        assert torch.equal(a[k], b[k]), (what, k)


@pytest.mark.subprocess
def test_fsdp_two_ranks_sharded_ema_matches_unsharded_replay(fsdp_run):
    proc, run = fsdp_run
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in proc.stdout + proc.stderr
    r0, r1 = _load(run)
    assert r0["global_step"] == r1["global_step"] == 4
    for r in (r0, r1):
        assert r["ema_is_reference"]
        assert r["generate_synced"]  # generate() decodes in lock-step on the ranks (synced_gpus)
        assert r["ema_local_numel"] < 0.6 * r["ema_numel"]  # each rank holds its shard, not the whole EMA
    for part in ("policy", "ema", "replay"):
        _same(r0[part], r1[part], part)  # the two ranks end identical
    for r in (r0, r1):
        _same(r["ema"], r["replay"], "sharded EMA vs unsharded replay")
        _same(r["ema_reloaded"], r["ema"], "EMA read back from the distributed checkpoint")
        _same(r["ema_reloaded_full"], r["ema"], "EMA read back from a full-state entry")
    floats = [k for k, v in r0["ema"].items() if v.is_floating_point()]
    assert any(not torch.equal(r0["ema"][k], r0["start"][k]) for k in floats)  # the EMA moved ...
    assert any(not torch.equal(r0["ema"][k], r0["policy"][k]) for k in floats)  # ... and lags the policy
    from torch.distributed.checkpoint import FileSystemReader

    ckpts = sorted((run / "ckpt").glob("*.ckpt"))
    assert [c.name for c in ckpts] == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"] and ckpts[0].is_dir()
    keys = FileSystemReader(str(ckpts[-1])).read_metadata().state_dict_metadata
    ema_keys = {k.removeprefix("state_dict.frozen_copies.ema_anchor.") for k in keys
                if k.startswith("state_dict.frozen_copies.ema_anchor.")}
    assert ema_keys == set(r0["ema"])


@pytest.mark.slow
@pytest.mark.subprocess
def test_fsdp_resume_mid_epoch_equals_uninterrupted(fsdp_run, tmp_path):
    _, run = fsdp_run
    _, resumed = _fit(tmp_path, "resumed", ckpt_path=str(run / "ckpt" / "epoch=0-step=2.ckpt"))
    full, part = _load(run), _load(resumed)
    for r in (0, 1):
        assert part[r]["global_step"] == 4
        _same(full[r]["policy"], part[r]["policy"], "policy")
        _same(full[r]["ema"], part[r]["ema"], "EMA")

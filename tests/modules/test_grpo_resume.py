"""Interrupt and resume: stopped mid-epoch and resumed from its checkpoint, a GRPO run with EMA anchor and
PID controller ends with the same weights, EMA state and PID state as an uninterrupted run."""
import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ttrl_lightning.callbacks import EMAAnchor, PIDKLController, RankStateDump
from ttrl_lightning.data.datamodules import PromptDataModule
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec


def _run(tmp, steps, ckpt_path=None, save_every=None):
    from ttrl_lightning.modules import GRPOModule, PolicySpec

    pl.seed_everything(0)
    module = GRPOModule(policy=PolicySpec(model="tiny:qwen2", lr=5e-3, seed=0), num_generations=4,
                        sampling=SamplingSpec(max_new_tokens=5),
                        grpo=GRPOSpec(kl_coef=0.1, reference="external", num_iterations=2))
    cbs = [EMAAnchor(rho=0.9), PIDKLController(warmup_steps=3), RankStateDump(str(tmp / "dump"))]
    if save_every:
        cbs.append(ModelCheckpoint(dirpath=str(tmp / "ckpt"), every_n_train_steps=save_every, save_top_k=-1))
    trainer = pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         enable_checkpointing=bool(save_every), callbacks=cbs)
    # 8 batches per epoch: the interruption at step 4 (2 optimizer steps per batch) is mid-epoch
    trainer.fit(module, PromptDataModule(task="arith", n_train=32, batch_size=4, seed=0), ckpt_path=ckpt_path)
    return torch.load(tmp / "dump" / "rank0.pt", weights_only=False)


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_resume_equals_uninterrupted(tmp_path):
    full = _run(tmp_path / "full", steps=12)
    _run(tmp_path / "part", steps=6, save_every=6)
    ckpt = next((tmp_path / "part" / "ckpt").glob("*.ckpt"))
    resumed = _run(tmp_path / "part", steps=12, ckpt_path=str(ckpt))
    assert full["global_step"] == resumed["global_step"] == 12
    _same(full["policy"], resumed["policy"])
    _same(full["ema"], resumed["ema"])
    assert full["pid"] == resumed["pid"]
    assert full["kl_coef"] == resumed["kl_coef"]
    assert full["pid"]["step"] == 6  # one PID update per batch, 2 optimizer steps per batch
    # the second half did move the weights (so the equality above is not trivial)
    first_half = torch.load(tmp_path / "part" / "ckpt" / ckpt.name, weights_only=False)["state_dict"]
    moved = [k for k in full["policy"] if not torch.equal(first_half["policy." + k], full["policy"][k])]
    assert moved

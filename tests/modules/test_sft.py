"""SFTModule trains a tiny model on generated tool-call traces; its loss falls."""
import lightning.pytorch as pl
import torch

from ttrl_lightning.data.datamodules import SFTDataModule
from ttrl_lightning.masking import IGNORE_INDEX
from ttrl_lightning.modules import PolicySpec, SFTModule


def test_sft_loss_falls_on_generated_task():
    pl.seed_everything(0)
    module = SFTModule(policy=PolicySpec(model="tiny:qwen2", lr=3e-3), w_act=2.0, feedback_dropout=0.05)
    data = SFTDataModule(task="arith3", n_train=128, n_val=32, batch_size=16, seed=0)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=3, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    before = trainer.validate(module, data, verbose=False)[0]["val/loss"]
    trainer.fit(module, data)
    after = trainer.validate(module, data, verbose=False)[0]["val/loss"]
    print(f"\nSFT val loss {before:.3f} -> {after:.3f}")
    assert after < 0.7 * before


def test_sft_training_step_uses_weighting_and_dropout():
    """The module's loss on a batch equals the weighted CE with the dropped-out inputs it drew."""
    # feedback_dropout=1: every observation hidden
    module = SFTModule(policy=PolicySpec(model="tiny:qwen2"), w_act=3.0, feedback_dropout=1.0)
    module.configure_model()
    data = SFTDataModule(task="arith3", n_train=4, n_val=4, batch_size=4, tokenizer=module.tokenizer)
    data.setup()
    batch = next(iter(data.train_dataloader()))
    loss, _ = module.loss(batch, train=True)
    hidden = torch.where(batch["observation_span"] > 0, torch.full_like(batch["input_ids"], module.hide_id),
                         batch["input_ids"])
    logits = module.policy(input_ids=hidden, attention_mask=batch["attention_mask"]).logits
    lp = torch.log_softmax(logits[:, :-1].double(), -1)
    labels, act = batch["labels"][:, 1:], batch["action_mask"][:, 1:]
    valid = labels != IGNORE_INDEX
    ce = -lp.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    w = (1 + 2.0 * act.double()) * valid
    torch.testing.assert_close(loss.double(), (w * ce).sum() / w.sum(), rtol=1e-5, atol=1e-6)
    # validation sees the true tool outputs (no dropout)
    val_loss, _ = module.loss(batch, train=False)
    assert not torch.isclose(val_loss, loss)


def test_sft_lora_and_mid_epoch_resume(tmp_path):
    """LoRA SFT through the trainer; a run stopped mid-epoch and resumed ends with the same weights."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    def run(steps, ckpt=None, save=False):
        pl.seed_everything(0)
        module = SFTModule(policy=PolicySpec(model="tiny:qwen2", lr=1e-2, lora={
            "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}))
        data = SFTDataModule(task="arith3", n_train=48, n_val=8, batch_size=8, seed=0)  # 6 batches / epoch
        cbs = [ModelCheckpoint(dirpath=str(tmp_path / "ck"), every_n_train_steps=steps, save_top_k=-1)] if save else []
        trainer = pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                             enable_checkpointing=save, callbacks=cbs)
        trainer.fit(module, data, ckpt_path=ckpt)
        return {k: v.clone() for k, v in module.policy.state_dict().items() if "lora_" in k}

    full = run(9)  # 1.5 epochs
    run(4, save=True)  # stopped mid-epoch 0
    resumed = run(9, ckpt=str(next((tmp_path / "ck").glob("*.ckpt"))))
    assert full and full.keys() == resumed.keys()
    for k in full:
        torch.testing.assert_close(full[k], resumed[k], rtol=0, atol=0)

"""SFTModule trains a tiny model on generated tool-call traces; its loss falls."""
import lightning.pytorch as pl
import pytest
import torch

from tests.modules._models import untied_with_bias
from ttrl_lightning.data.datamodules import SFTDataModule
from ttrl_lightning.masking import IGNORE_INDEX
from ttrl_lightning.modules import PolicySpec, SFTModule
from ttrl_lightning.modules.losses import feedback_dropout


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
    module = SFTModule(policy=PolicySpec(model="tiny:qwen2"), w_act=3.0, feedback_dropout=0.5)
    module.configure_model()
    data = SFTDataModule(task="arith3", n_train=4, n_val=4, batch_size=4, tokenizer=module.tokenizer)
    data.setup()
    batch = next(iter(data.train_dataloader()))
    loss, _ = module.loss(batch, train=True)
    # the draw the step made: same derived seed (global step 0, rank 0), so the same observations hidden
    hidden = feedback_dropout(batch["input_ids"], batch["observation_span"], 0.5, module.hide_id,
                              module._dropout_generator())
    assert (hidden != batch["input_ids"]).any() and (hidden == module.hide_id).sum() < (
        batch["observation_span"] > 0).sum()  # some observations hidden, not all
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


def _sft_step(logprob_impl, untied=False):
    """One SGD step (lr 1) of SFTModule on a fixed batch: (loss, stats, weight change, module)."""
    module = SFTModule(policy=PolicySpec(model="tiny:llama" if untied else "tiny:qwen2", seed=3), w_act=2.5,
                       feedback_dropout=0.0, logprob_impl=logprob_impl)
    module.configure_model()
    if untied:
        module.policy = untied_with_bias(module.policy)
    data = SFTDataModule(task="arith3", n_train=4, n_val=4, batch_size=4, tokenizer=module.tokenizer, seed=0)
    data.setup()
    batch = next(iter(data.train_dataloader()))
    before = {k: v.detach().clone() for k, v in module.policy.named_parameters()}
    loss, stats = module.loss(batch, train=True)
    loss.backward()
    torch.optim.SGD(module.policy.parameters(), lr=1.0).step()
    delta = {k: v.detach() - before[k] for k, v in module.policy.named_parameters()}
    return loss.detach(), stats, delta, module


@pytest.mark.parametrize("untied", [False, True], ids=["tied_head", "untied_head_with_bias"])
def test_fused_sft_step_equals_materialised_step(untied, monkeypatch):
    """The fused loss path (linear_logprobs on the hidden states) gives the materialised path's loss, CE
    parts and SGD update, for a tied head (tiny:qwen2) and an untied head with a bias (tiny:llama); the
    fused step never calls the model's own forward (the one that builds [B, T, V] logits)."""
    ref_loss, ref_stats, ref_delta, ref_module = _sft_step("materialized", untied)
    calls = []
    cls = type(ref_module.policy)
    real_forward = cls.forward
    monkeypatch.setattr(cls, "forward", lambda self, *a, **k: calls.append(1) or real_forward(self, *a, **k))
    loss, stats, delta, module = _sft_step("auto", untied)
    assert calls == [] and module.logprob_path.noticed == set()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for k in ("ce_text", "ce_action"):
        torch.testing.assert_close(stats[k], ref_stats[k], rtol=1e-5, atol=1e-6)
    head = "lm_head.weight" if untied else "model.embed_tokens.weight"
    assert float(ref_delta[head].abs().max()) > 1e-3  # the step does move the head
    for k in ref_delta:
        torch.testing.assert_close(delta[k], ref_delta[k], rtol=1e-4, atol=1e-6, msg=k)


def test_sft_lora_and_mid_epoch_resume(tmp_path):
    """LoRA SFT through the trainer; a run stopped mid-epoch and resumed ends with the same weights."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    def run(steps, ckpt=None, save=False):
        pl.seed_everything(0)
        module = SFTModule(policy=PolicySpec(model="tiny:qwen2", lr=1e-2, lora={
            "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}))
        data = SFTDataModule(task="arith3", n_train=48, n_val=8, batch_size=8, seed=0)  # 6 batches / epoch
        cbs = ([ModelCheckpoint(dirpath=str(tmp_path / "ck"), every_n_train_steps=steps, save_top_k=-1)]
               if save else [])
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


def test_feedback_dropout_differs_across_micro_batches_and_is_a_pure_function(monkeypatch):
    """accumulate_grad_batches=2: the two micro-batches of one optimizer step hide different observations,
    and every mask drawn equals its recomputation from (seed, global_step, micro-batch, rank) alone."""
    import ttrl_lightning.modules.sft as sft_mod
    from ttrl_lightning.seeding import derived_generator

    drawn = []

    def recording_dropout(ids, span, p, hide_id, generator):
        out = feedback_dropout(ids, span, p, hide_id, generator)
        drawn.append((ids.clone(), span.clone(), out))
        return out

    monkeypatch.setattr(sft_mod, "feedback_dropout", recording_dropout)
    pl.seed_everything(0)
    module = SFTModule(policy=PolicySpec(model="tiny:qwen2", seed=3), feedback_dropout=0.5)
    data = SFTDataModule(task="arith3", n_train=8, n_val=4, batch_size=2, seed=0)  # 4 micro-batches
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, accumulate_grad_batches=2, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, enable_checkpointing=False)
    trainer.fit(module, data)
    assert len(drawn) == 4
    for k, (ids, span, out) in enumerate(drawn):  # optimizer step k // 2, micro-batch k % 2
        want = feedback_dropout(ids, span, 0.5, module.hide_id,
                                derived_generator(3, "feedback_dropout", (k // 2) * 2 + k % 2, 0))
        assert torch.equal(out, want)
    # the same batch under micro-batches 0 and 1 of step 0: different masks (the old seed gave the same one)
    ids, span, _ = drawn[0]
    masks = [feedback_dropout(ids, span, 0.5, module.hide_id, derived_generator(3, "feedback_dropout", m, 0))
             for m in (0, 1)]
    assert not torch.equal(masks[0], masks[1])


def test_sft_of_a_vlm_on_cota_traces_sees_the_images():
    """CoTA SFT of a tiny Qwen2-VL: the datamodule finds the policy's processor, the batches carry the scene
    and crop pixels, and the loss is the plain CE of a forward with those pixels (w_act = 1)."""
    pytest.importorskip("cv2")
    import torch.nn.functional as F

    from ttrl_lightning.data.cota import CoTADataModule

    m = SFTModule(policy=PolicySpec(model="tiny:qwen2_vl", tiny_kwargs={"max_pos": 2048}, lr=1e-3), w_act=1.0,
                  feedback_dropout=0.0)
    dm = CoTADataModule(kinds=["read_small", "colour"], n_train=2, n_val=2, batch_size=2, max_length=2048)
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    trainer.fit(m, dm)
    batch = next(iter(dm.train_dataloader()))
    assert batch["image_grid_thw"].shape[0] == 3  # two scenes and read_small's crop
    loss, _ = m.loss(batch, train=False)
    vision = {k: batch[k] for k in ("pixel_values", "image_grid_thw", "mm_token_type_ids")}
    with torch.no_grad():
        logits = m.policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **vision).logits
    ref = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch["labels"][:, 1:].flatten(),
                          ignore_index=IGNORE_INDEX)
    assert torch.allclose(loss, ref, atol=1e-5)
    other = dict(vision, pixel_values=torch.rand_like(vision["pixel_values"]))  # other pixels: another loss
    with torch.no_grad():
        moved = m.policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **other).logits
    assert not torch.allclose(moved, logits)

"""GRPOModule: the step against a hand-assembled loss, learning on a toy reward, hook overrides, EMA anchor."""
import copy

import lightning.pytorch as pl
import pytest
import torch

from ttrl_lightning.callbacks import EMAAnchor, PIDKLController, ema_update_
from ttrl_lightning.data.datamodules import PromptDataModule
from ttrl_lightning.modules import GRPOModule
from ttrl_lightning.modules.losses import group_advantages


def sevens(*, prompts, completions, **_):
    """Toy reward: the share of '7' characters in the completion."""
    return [c.count("7") / max(len(c), 1) for c in completions]


def _trainer(steps, callbacks=(), **kw):
    return pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      limit_val_batches=0, callbacks=list(callbacks), **kw)


def test_grpo_loss_matches_hand_assembled_formula():
    m = GRPOModule(model="tiny:qwen2", rewards=[sevens], num_generations=4, max_new_tokens=5, kl_coef=0.3,
                   loss_aggregation="seq_mean")
    m.configure_model()
    ref = copy.deepcopy(m.policy)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    m.set_reference_model(ref)
    batch = {"prompt": ["1+2=", "30-4="], "answer": ["3", "26"]}
    r = m.rollout(batch)
    rewards = m.score(r, batch)
    torch.testing.assert_close(rewards, torch.tensor(sevens(prompts=None, completions=r.texts)))
    adv = group_advantages(rewards.view(2, 4)).view(8)
    logp = m.sequence_logprobs(m.policy, r)
    with torch.no_grad():
        ref_lp = m.sequence_logprobs(ref, r)
    mask = r.completion_mask.float()
    # naive: per token -A (ratio 1 at the first iteration) + beta * k3, mean per sequence then over sequences
    total = 0.0
    for i in range(8):
        n = int(mask[i].sum())
        acc = 0.0
        for t in range(n):
            d = float(ref_lp[i, t] - logp[i, t])
            acc += -float(adv[i]) + 0.3 * (torch.exp(torch.tensor(d)).item() - d - 1)
        total += acc / n
    parts = m.policy_loss(logp, logp.detach(), adv)
    token = parts["pg"] + m.kl_coef * m.kl_penalty(logp, ref_lp)
    ours = ((token * mask).sum(1) / mask.sum(1)).mean()
    assert ours.item() == pytest.approx(total / 8, rel=1e-5, abs=1e-6)


def test_grpo_learns_toy_reward():
    pl.seed_everything(0)
    m = GRPOModule(model="tiny:qwen2", rewards=[sevens], num_generations=8, max_new_tokens=6, lr=1e-2,
                   kl_coef=0.0, reference="none", seed=0)
    data = PromptDataModule(task="arith", n_train=64, batch_size=4)
    trainer = _trainer(16)
    trainer.fit(m, data)
    eng_params = m.sampling_params(seed=123)
    batch = ["1+2=", "5+5=", "12-3=", "9+1="]
    m.eval()
    final = sum(sevens(completions=m.engine.generate(m.policy, batch, eng_params).texts, prompts=None)) / 32
    fresh = GRPOModule(model="tiny:qwen2", rewards=[sevens], seed=0)
    fresh.configure_model()
    start = sum(sevens(completions=fresh.engine.generate(fresh.policy, batch, eng_params).texts, prompts=None)) / 32
    print(f"\ntoy reward (share of '7'): {start:.3f} -> {final:.3f}")
    assert final > start + 0.15


class ConstantScore(GRPOModule):
    """A subclass overriding one hook only (as CC-RFT/TTRL do)."""

    def score(self, rollouts, batch):
        self.score_calls = getattr(self, "score_calls", 0) + 1
        return torch.arange(rollouts.completion_ids.shape[0], dtype=torch.float32) % 2


def test_hooks_are_overridable_and_ema_pid_run():
    pl.seed_everything(0)
    m = ConstantScore(model="tiny:qwen2", num_generations=2, max_new_tokens=4, kl_coef=0.1, reference="external",
                      lr=1e-2)
    ema, pid = EMAAnchor(rho=0.9), PIDKLController(warmup_steps=1)
    trainer = _trainer(3, callbacks=[ema, pid])
    trainer.fit(m, PromptDataModule(n_train=8, batch_size=2))
    assert m.score_calls == 3
    assert m.reference_model is ema.ema_model
    assert pid.controller.state.step == 3 and m.kl_coef == pid.controller.beta
    assert ema.num_updates == 3
    # the EMA moved towards the policy but is not the policy
    diffs = [float((a - b).abs().max()) for a, b in zip(ema.ema_model.parameters(), m.policy.parameters())]
    assert max(diffs) > 0


def test_ema_update_formula_and_no_weight_swap():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    ema = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    before_model = {k: v.clone() for k, v in model.state_dict().items()}
    before_ema = {k: v.clone() for k, v in ema.state_dict().items()}
    ema_update_(ema, model, 0.99)
    for k in before_model:
        torch.testing.assert_close(ema.state_dict()[k], 0.99 * before_ema[k] + 0.01 * before_model[k])
        assert torch.equal(model.state_dict()[k], before_model[k])  # never written into the trained model


def test_reference_none_requires_zero_beta_and_bad_reward_raises():
    with pytest.raises(ValueError, match="kl_coef=0"):
        GRPOModule(reference="none", kl_coef=0.1)
    m = GRPOModule(model="tiny:qwen2", rewards=[lambda **kw: [float("nan")] * len(kw["completions"])],
                   num_generations=2, max_new_tokens=2)
    m.configure_model()
    batch = {"prompt": ["1+1="], "answer": ["2"]}
    with pytest.raises(ValueError, match="non-finite"):
        m.score(m.rollout(batch), batch)


class MajorityVoteGRPO(GRPOModule):
    """TTRL-style subclass: the label of each prompt is the majority answer of its own N samples (no ground
    truth), passed to the unchanged reward callables as the ``answer`` column."""

    def score(self, rollouts, batch):
        from collections import Counter

        from ttrl_lightning.rewards.simple import first_integer

        n = rollouts.n
        answers = [first_integer(t) for t in rollouts.texts]
        labels = []
        for g in range(len(batch["prompt"])):
            votes = Counter(a for a in answers[g * n:(g + 1) * n] if a is not None)
            labels.append(votes.most_common(1)[0][0] if votes else "")
        self.last_labels = labels
        return super().score(rollouts, {"prompt": batch["prompt"], "answer": labels})


def test_subclass_with_pseudo_labels():
    from ttrl_lightning.rewards.simple import first_integer

    m = MajorityVoteGRPO(model="tiny:qwen2", num_generations=6, max_new_tokens=4, kl_coef=0.0, reference="none")
    m.configure_model()
    batch = {"prompt": ["1+2=", "4+4=", "7-2="], "answer": ["3", "8", "5"]}
    r = m.rollout(batch)
    rewards = m.score(r, batch)
    assert any(m.last_labels)
    for g, label in enumerate(m.last_labels):
        texts = r.texts[g * 6:(g + 1) * 6]
        # reward 1 exactly for the samples whose first integer is their own group's majority answer
        assert rewards[g * 6:(g + 1) * 6].tolist() == [1.0 if label and first_integer(t) == label else 0.0
                                                       for t in texts]
    assert rewards.sum() >= 1

"""GRPO under a bf16-mixed trainer (``cli.precision`` chooses it on CPUs with bf16 in hardware): fp32 weights,
model passes in bf16 autocast, scoring in fp32, the sampler/trainer log-prob gap and TIS weight logged within
the bound stated here, and each iteration's forward reading the weights the previous iteration updated."""
import lightning.pytorch as pl
import pytest
import torch

from ttrl_lightning.data.datamodules import PromptDataModule
from ttrl_lightning.modules import GRPOModule, PolicySpec
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec

#: the most the trainer's pass and the bf16 sampler may differ, mean over tokens (nats), and the TIS weight from 1
BF16_GAP_BOUND = 2e-2


def alternating(*, prompts, completions, **_):
    """Rewards 1, 0, 1, 0, ... : every group has a spread, so every step updates the weights."""
    return [float(i % 2) for i in range(len(completions))]


class Watched(GRPOModule):
    """Records whether autocast was on while sampling and while scoring, and for every training pass of the
    policy the log-probs it gave beside those of a forward that casts the current weights afresh."""

    def on_fit_start(self):
        self.autocast_in = {}
        self.passes = []

    def rollout(self, batch):
        self.autocast_in["rollout"] = torch.is_autocast_enabled("cpu")
        return super().rollout(batch)

    def score(self, rollouts, batch):
        self.autocast_in["score"] = torch.is_autocast_enabled("cpu")
        return super().score(rollouts, batch)

    def sequence_logprobs(self, model, rollouts, temperature=None, raw=False):
        out = super().sequence_logprobs(model, rollouts, temperature, raw)
        if model is self.policy and torch.is_grad_enabled():
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
                fresh = super().sequence_logprobs(model, rollouts, temperature)
            self.passes.append(((out[0] if raw else out).detach(), fresh))
        return out


def _fit(precision: str, iterations: int = 1, steps: int = 2) -> tuple[Watched, dict]:
    pl.seed_everything(0)
    m = Watched(policy=PolicySpec(model="tiny:qwen2", lr=0.3, seed=0), rewards=[alternating], num_generations=4,
                sampling=SamplingSpec(max_new_tokens=6),
                grpo=GRPOSpec(kl_coef=0.0, reference="none", num_iterations=iterations, max_grad_norm=None))
    trainer = pl.Trainer(accelerator="cpu", precision=precision, max_steps=steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(m, PromptDataModule(task="arith", n_train=8, batch_size=2))
    return m, dict(trainer.callback_metrics)


def test_bf16_mixed_keeps_fp32_weights_samples_in_bf16_scores_in_fp32_and_logs_the_gap():
    m, logs = _fit("bf16-mixed")
    assert all(p.dtype == torch.float32 for p in m.policy.parameters())
    assert m.autocast_in == {"rollout": True, "score": False}
    gap, weight = float(logs["train/sampler_logprob_gap"]), float(logs["train/tis_weight"])
    assert 0 < gap < BF16_GAP_BOUND  # the cached bf16 decode and the trainer's bf16 forward round differently
    assert abs(weight - 1) < BF16_GAP_BOUND
    m32, logs32 = _fit("32-true")
    assert m32.autocast_in == {"rollout": False, "score": False}
    assert "train/sampler_logprob_gap" not in logs32 and "train/tis_weight" not in logs32  # one model, one dtype


def test_each_iteration_reads_the_weights_the_previous_one_updated(monkeypatch):
    """With two iterations per step, the second forward equals one that casts the updated weights afresh. It
    holds because Lightning's autocast keeps no cast cache; an autocast with the cache on would keep each
    weight's bf16 copy for the whole training_step (checked: the second iteration then reads the old copies)."""
    from lightning.pytorch.plugins.precision.amp import MixedPrecision

    m, _ = _fit("bf16-mixed", iterations=2, steps=1)
    assert len(m.passes) == 2
    for ours, fresh in m.passes:
        torch.testing.assert_close(ours, fresh, rtol=0, atol=1e-6)
    monkeypatch.setattr(MixedPrecision, "autocast_context_manager",
                        lambda self: torch.autocast(self.device, dtype=torch.bfloat16, cache_enabled=True))
    stale, _ = _fit("bf16-mixed", iterations=2, steps=1)
    ours, fresh = stale.passes[1]
    assert float((ours - fresh).abs().max()) > 1e-3

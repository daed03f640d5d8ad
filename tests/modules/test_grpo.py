"""GRPOModule: the step against a hand-assembled loss, learning on a toy reward, hook overrides (rewards with
abstaining groups), the EMA anchor and PID controller in a run, log-probs against generate's."""
import copy

import lightning.pytorch as pl
import pytest
import torch

from ttrl_lightning.callbacks import EMAAnchor, PIDKLController
from ttrl_lightning.data.datamodules import PromptDataModule
from ttrl_lightning.modules import GRPOModule, PolicySpec, RolloutRewards
from ttrl_lightning.modules.losses import group_advantages
from ttrl_lightning.rollout import HFGenerateEngine, Rollouts, SamplingParams
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec

TINY = PolicySpec(model="tiny:qwen2")


def sevens(*, prompts, completions, **_):
    """Toy reward: the share of '7' characters in the completion."""
    return [c.count("7") / max(len(c), 1) for c in completions]


def _trainer(steps, callbacks=(), **kw):
    return pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                      limit_val_batches=0, callbacks=list(callbacks), **kw)


def test_grpo_loss_matches_hand_assembled_formula():
    m = GRPOModule(policy=TINY, rewards=[sevens], num_generations=4, sampling=SamplingSpec(max_new_tokens=5),
                   grpo=GRPOSpec(kl_coef=0.3, loss_aggregation="seq_mean"))
    m.configure_model()
    ref = copy.deepcopy(m.policy)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    m.set_reference_model(ref)
    batch = {"prompt": ["1+2=", "30-4="], "gold": ["3", "26"]}
    r = m.rollout(batch)
    scored = m.score(r, batch)
    rewards = scored.rewards
    assert scored.mask(2).tolist() == [True, True]  # the base hook keeps every group
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
    m = GRPOModule(policy=PolicySpec(model="tiny:qwen2", lr=1e-2, seed=0), rewards=[sevens], num_generations=8,
                   sampling=SamplingSpec(max_new_tokens=6), grpo=GRPOSpec(kl_coef=0.0, reference="none"))
    data = PromptDataModule(task="arith", n_train=64, batch_size=4)
    trainer = _trainer(16)
    trainer.fit(m, data)
    eng_params = m.sampling_params(seed=123)
    batch = ["1+2=", "5+5=", "12-3=", "9+1="]
    m.eval()
    final = sum(sevens(completions=m.engine.generate(m.policy, batch, eng_params).texts, prompts=None)) / 32
    fresh = GRPOModule(policy=PolicySpec(model="tiny:qwen2", seed=0), rewards=[sevens])
    fresh.configure_model()
    start_texts = fresh.engine.generate(fresh.policy, batch, eng_params).texts
    start = sum(sevens(completions=start_texts, prompts=None)) / 32
    print(f"\ntoy reward (share of '7'): {start:.3f} -> {final:.3f}")
    assert final > start + 0.15


class AlternatingRewards(GRPOModule):
    """A subclass overriding one hook only (as CC-RFT/TTRL do)."""

    def score(self, rollouts, batch):
        self.reward_calls = getattr(self, "reward_calls", 0) + 1
        return RolloutRewards(torch.arange(rollouts.completion_ids.shape[0], dtype=torch.float32) % 2)


def test_hooks_are_overridable_and_ema_pid_run():
    pl.seed_everything(0)
    m = AlternatingRewards(policy=PolicySpec(model="tiny:qwen2", lr=1e-2), num_generations=2,
                           sampling=SamplingSpec(max_new_tokens=4), grpo=GRPOSpec(kl_coef=0.1, reference="external"))
    ema, pid = EMAAnchor(rho=0.9), PIDKLController(warmup_steps=1)

    class Weights(pl.Callback):  # the policy's weights at the start and after every step
        def __init__(self):
            self.seen = []

        def on_fit_start(self, trainer, module):
            self.seen.append([p.detach().clone() for p in module.policy.parameters()])

        def on_train_batch_end(self, trainer, module, *args):
            self.seen.append([p.detach().clone() for p in module.policy.parameters()])

    weights = Weights()
    trainer = _trainer(3, callbacks=[weights, ema, pid])
    trainer.fit(m, PromptDataModule(n_train=8, batch_size=2))
    assert m.reward_calls == 3
    assert m.reference_model is ema.ema_model
    assert pid.controller.state.step == 3 and m.kl_coef == pid.controller.beta
    assert ema.num_updates == 3
    # the EMA is the recursion e <- 0.9 e + 0.1 theta over the three steps' weights, from the initial policy
    expected = weights.seen[0]
    for step in weights.seen[1:]:
        expected = [0.9 * e + 0.1 * w for e, w in zip(expected, step)]
    for e, got in zip(expected, ema.ema_model.parameters()):
        torch.testing.assert_close(got.detach(), e, rtol=1e-5, atol=1e-7)
    assert max(float((a - b).abs().max()) for a, b in zip(ema.ema_model.parameters(), m.policy.parameters())) > 1e-4


def test_reference_none_requires_zero_beta_and_bad_reward_raises():
    with pytest.raises(ValueError, match="kl_coef=0"):
        GRPOModule(grpo=GRPOSpec(reference="none", kl_coef=0.1))
    m = GRPOModule(policy=TINY, rewards=[lambda **kw: [float("nan")] * len(kw["completions"])], num_generations=2,
                   sampling=SamplingSpec(max_new_tokens=2))
    m.configure_model()
    batch = {"prompt": ["1+1="], "gold": ["2"]}
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
        return super().score(rollouts, {"prompt": batch["prompt"], "gold": labels})


def test_subclass_with_pseudo_labels():
    from ttrl_lightning.rewards.simple import first_integer

    m = MajorityVoteGRPO(policy=TINY, num_generations=6, sampling=SamplingSpec(max_new_tokens=4),
                         grpo=GRPOSpec(kl_coef=0.0, reference="none"))
    m.configure_model()
    batch = {"prompt": ["1+2=", "4+4=", "7-2="], "gold": ["3", "8", "5"]}
    r = m.rollout(batch)
    rewards = m.score(r, batch).rewards
    assert any(m.last_labels)
    for g, label in enumerate(m.last_labels):
        texts = r.texts[g * 6:(g + 1) * 6]
        # reward 1 exactly for the samples whose first integer is their own group's majority answer
        assert rewards[g * 6:(g + 1) * 6].tolist() == [1.0 if label and first_integer(t) == label else 0.0
                                                       for t in texts]
    assert rewards.sum() >= 1


# ----------------------------------------------------------------------------- abstaining groups
def _rows(r: Rollouts, keep: list[int]) -> Rollouts:
    """The rollout rows ``keep`` (whole groups, in order) as a Rollouts of their own."""
    idx = torch.tensor(keep)
    groups = sorted({int(r.group[i]) for i in keep})
    group = torch.tensor([groups.index(int(r.group[i])) for i in keep])
    return Rollouts(prompt_ids=r.prompt_ids[idx], prompt_mask=r.prompt_mask[idx],
                    completion_ids=r.completion_ids[idx], completion_mask=r.completion_mask[idx],
                    texts=[r.texts[i] for i in keep], group=group, n=r.n,
                    signals={k: v[idx] for k, v in r.signals.items()})


class FixedBatch(GRPOModule):
    """Trains on a fixed rollout batch with fixed rewards; groups in ``abstain`` get ``group_mask`` False.
    Plain SGD with lr 1 (and no clipping), so one step changes the weights by exactly minus the gradient."""

    fixed: Rollouts
    fixed_rewards: torch.Tensor
    abstain: tuple[int, ...] = ()
    drop: tuple[int, ...] = ()

    def rollout(self, batch):
        return self.fixed

    def score(self, rollouts, batch):
        keep = torch.ones(rollouts.completion_ids.shape[0] // rollouts.n, dtype=torch.bool)
        keep[list(self.abstain)] = False
        rows = torch.ones(rollouts.completion_ids.shape[0], dtype=torch.bool)
        rows[list(self.drop)] = False
        return RolloutRewards(self.fixed_rewards, keep, rows if self.drop else None)

    def group_advantages(self, scored):
        self.last_advantages = super().group_advantages(scored)
        return self.last_advantages

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.policy.parameters() if p.requires_grad], lr=1.0)


def _fixed_batch_step(rollouts, rewards, reference, aggregation, **masks):
    """One SGD step of ``FixedBatch`` on ``rollouts`` / ``rewards`` (KL 0.5 to ``reference``); ``masks``:
    ``abstain`` groups / ``drop`` rows. Returns the module, the weight change and the logged metrics."""
    m = FixedBatch(policy=TINY, num_generations=4, sampling=SamplingSpec(max_new_tokens=5),
                   grpo=GRPOSpec(kl_coef=0.5, reference="external", loss_aggregation=aggregation, max_grad_norm=None))
    m.fixed, m.fixed_rewards = rollouts, rewards
    for name, value in masks.items():
        setattr(m, name, value)
    m.set_reference_model(reference)
    m.configure_model()
    before = {k: v.detach().clone() for k, v in m.policy.named_parameters()}
    trainer = _trainer(1)
    trainer.fit(m, PromptDataModule(n_train=4, batch_size=2))
    delta = {k: v.detach() - before[k] for k, v in m.policy.named_parameters()}
    return m, delta, trainer.callback_metrics


@pytest.mark.parametrize("aggregation", ["seq_mean", "token_mean"])
def test_abstained_group_gets_zero_advantage_and_no_gradient(aggregation):
    """With group 0 abstaining, one training step (i) gives group 0's rows advantage exactly 0, (ii) has the
    same loss and changes the weights by the same amount (the same gradient, policy and KL terms included)
    as the step on the batch without group 0's rows, (iii) logs one abstained group; and (iv) without the
    abstention the update differs, so (ii) is not trivially true."""
    from ttrl_lightning.models import load_model

    source = GRPOModule(policy=TINY, num_generations=4, sampling=SamplingSpec(max_new_tokens=5))
    source.configure_model()
    full = source.rollout({"prompt": ["1+2=", "30-4=", "7+7="]})  # G = 3 groups of N = 4
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    reference = load_model("tiny:qwen2", source.tokenizer, seed=1)  # a different policy: the KL term is not 0

    def step(rollouts, rewards, abstain=()):
        return _fixed_batch_step(rollouts, rewards, reference, aggregation, abstain=abstain)

    masked, d_masked, logs_masked = step(full, rewards, abstain=(0,))
    kept, d_kept, logs_kept = step(_rows(full, list(range(4, 12))), rewards[4:])
    unmasked, d_unmasked, logs_unmasked = step(full, rewards)

    assert masked.last_advantages[:4].tolist() == [0.0] * 4
    assert masked.last_advantages[4:].abs().min() > 0.1
    torch.testing.assert_close(masked.last_advantages[4:], kept.last_advantages)
    assert float(logs_masked["train/abstained_groups"]) == 1
    assert float(logs_kept["train/abstained_groups"]) == 0
    torch.testing.assert_close(logs_masked["train/loss"], logs_kept["train/loss"], rtol=1e-5, atol=1e-7)
    assert float(logs_masked["train/reward"]) == pytest.approx(float(rewards[4:].mean()))  # kept groups only
    for k in d_kept:
        torch.testing.assert_close(d_masked[k], d_kept[k], rtol=1e-4, atol=1e-7, msg=k)
    moved = max(float((d_unmasked[k] - d_kept[k]).abs().max()) for k in d_kept)
    assert moved > 1e-4  # group 0's rows do contribute when they are not masked
    # (v) the KL observation (the PID controller's input, train/kl) is the one of the batch without group 0:
    # the abstained rows' KL is not observed; with them (every row averaged) it would differ
    torch.testing.assert_close(masked.kl_observation, kept.kl_observation, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(logs_masked["train/kl"], logs_kept["train/kl"], rtol=1e-5, atol=1e-8)
    assert float(masked.kl_observation_tokens) == float(kept.kl_observation_tokens) > 0
    assert abs(float(masked.kl_observation) - float(unmasked.kl_observation)) > 1e-6
    assert float(logs_unmasked["train/kl"]) == pytest.approx(float(unmasked.kl_observation))


def test_score_hook_must_return_rollout_rewards():
    class Bare(GRPOModule):
        def score(self, rollouts, batch):
            return torch.zeros(rollouts.completion_ids.shape[0])

    m = Bare(policy=TINY, num_generations=2, sampling=SamplingSpec(max_new_tokens=2))
    m.configure_model()
    batch = {"prompt": ["1+1=", "2+2="], "gold": ["2", "4"]}
    r = m.rollout(batch)
    with pytest.raises(TypeError, match="RolloutRewards"):
        m.scored(r, batch)
    with pytest.raises(ValueError, match=r"group_mask must be a bool tensor of shape \[2\]"):
        RolloutRewards(torch.zeros(4), torch.ones(3, dtype=torch.bool)).check(4, 2)
    with pytest.raises(ValueError, match=r"shape \[4\]"):
        RolloutRewards(torch.zeros(3)).check(4, 2)


@pytest.mark.parametrize("aggregation", ["seq_mean", "token_mean"])
def test_a_dropped_row_carries_no_policy_or_kl_term_and_no_weight(aggregation):
    """A row left out by ``row_mask`` (Pixelis' near-duplicates; they used to keep their KL term and their
    weight in the loss denominator): rewriting that row's tokens and length leaves the update and the loss
    exactly as they were, while without the drop the same rewrite changes the update."""
    import dataclasses

    from ttrl_lightning.models import load_model

    source = GRPOModule(policy=TINY, num_generations=4, sampling=SamplingSpec(max_new_tokens=5))
    source.configure_model()
    full = source.rollout({"prompt": ["1+2=", "30-4="]})
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    ids, mask = full.completion_ids.clone(), full.completion_mask.clone()
    ids[5] = (ids[5] + 7) % 50
    mask[5, 2:] = 0
    ids[5, 2:] = source.tokenizer.pad_token_id
    rewritten = dataclasses.replace(full, completion_ids=ids, completion_mask=mask, texts=list(full.texts))
    reference = load_model("tiny:qwen2", source.tokenizer, seed=1)

    def step(rollouts, drop=()):
        _, delta, logs = _fixed_batch_step(rollouts, rewards, reference, aggregation, drop=drop)
        return delta, logs

    d_drop, logs_drop = step(full, drop=(5,))
    d_drop_rewritten, logs_rewritten = step(rewritten, drop=(5,))
    d_full, _ = step(full)
    d_full_rewritten, _ = step(rewritten)
    torch.testing.assert_close(logs_drop["train/loss"], logs_rewritten["train/loss"], rtol=1e-6, atol=1e-8)
    # nor does its KL enter the KL observation (train/kl, the PID controller's input)
    torch.testing.assert_close(logs_drop["train/kl"], logs_rewritten["train/kl"], rtol=1e-6, atol=1e-8)
    for k in d_drop:
        torch.testing.assert_close(d_drop[k], d_drop_rewritten[k], rtol=1e-5, atol=1e-8, msg=k)
    assert float(logs_drop["train/dropped_rows"]) == 1
    assert max(float((d_full[k] - d_full_rewritten[k]).abs().max()) for k in d_full) > 1e-5


def test_the_kl_observation_averages_the_tokens_that_carry_loss_only():
    """A hand-built step: token KL 1 on the abstained group's rows, 9 on a dropped row, 2 and 4 on the kept
    rows' tokens. The observation (the PID controller's input, train/kl) is the mean over the tokens that
    carry loss, 3, not the mean over every trained token; a step that trains no token observes nothing."""
    from ttrl_lightning.modules.step_records import StepStats

    m = GRPOModule(policy=TINY, num_generations=2, sampling=SamplingSpec(max_new_tokens=2))
    token_kl = torch.tensor([[1.0, 1.0], [1.0, 1.0], [2.0, 4.0], [9.0, 9.0]])  # groups of 2: [0, 1], [2, 3]
    kept = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])  # group 0 abstains, row 3 dropped
    stats = StepStats(torch.zeros(()), token_kl, torch.zeros(4, 2, dtype=torch.bool), kept)
    kl, tokens = m.observed_kl(stats)
    assert float(kl) == pytest.approx(3.0) and float(tokens) == 2
    kl, tokens = m.observed_kl(StepStats(torch.zeros(()), token_kl, stats.clipped, torch.zeros(4, 2)))
    assert float(kl) == 0 and float(tokens) == 0


def test_a_step_where_every_group_abstains_holds_beta():
    """No token trained: no KL observation. The PID controller holds beta and its state (it used to read the
    abstained rows' KL and move beta), and train/kl is not logged (a mean over no token is not 0)."""
    from ttrl_lightning.models import load_model

    source = GRPOModule(policy=TINY, num_generations=4, sampling=SamplingSpec(max_new_tokens=5))
    source.configure_model()
    full = source.rollout({"prompt": ["1+2=", "30-4="]})
    m = FixedBatch(policy=TINY, num_generations=4, sampling=SamplingSpec(max_new_tokens=5),
                   grpo=GRPOSpec(kl_coef=0.5, reference="external", max_grad_norm=None))
    m.fixed, m.fixed_rewards, m.abstain = full, torch.tensor([1.0, 0.0] * 4), (0, 1)
    m.set_reference_model(load_model("tiny:qwen2", source.tokenizer, seed=1))
    m.configure_model()
    pid = PIDKLController(warmup_steps=0)
    trainer = _trainer(2, callbacks=[pid])
    trainer.fit(m, PromptDataModule(n_train=4, batch_size=2))
    assert float(m.kl_observation_tokens) == 0
    assert pid.controller.state.step == 0 and pid.controller.state.kl_smoothed is None
    assert m.kl_coef == pytest.approx(0.5) and pid.last_reduced_kl is None
    assert "train/kl" not in trainer.callback_metrics
    assert float(trainer.callback_metrics["pid/beta"]) == pytest.approx(0.5)


def test_a_metric_the_step_does_not_have_is_logged_as_a_gap_not_as_the_last_value(tmp_path):
    """Step 0 trains tokens and logs train/kl; step 1 abstains on every group and has no KL. Lightning would hand
    the CSV step 0's train/kl again at step 1 (it repeats an on_step metric until the epoch ends); the log gets
    NaN there, and the curve reader skips it."""
    import csv

    from lightning.pytorch.loggers import CSVLogger

    from ttrl_lightning.study.runs import logged_curves
    from ttrl_lightning.models import load_model

    class AbstainsAfterTheFirstStep(FixedBatch):
        def score(self, rollouts, batch):
            scored = super().score(rollouts, batch)
            self.abstain = (0, 1)  # from the next step on
            return scored

    source = GRPOModule(policy=TINY, num_generations=4, sampling=SamplingSpec(max_new_tokens=5))
    source.configure_model()
    m = AbstainsAfterTheFirstStep(policy=TINY, num_generations=4, sampling=SamplingSpec(max_new_tokens=5),
                                  grpo=GRPOSpec(kl_coef=0.5, reference="external", max_grad_norm=None))
    m.fixed, m.fixed_rewards = source.rollout({"prompt": ["1+2=", "30-4="]}), torch.tensor([1.0, 0.0] * 4)
    m.set_reference_model(load_model("tiny:qwen2", source.tokenizer, seed=1))
    m.configure_model()
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, logger=CSVLogger(str(tmp_path)), log_every_n_steps=1,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(m, PromptDataModule(n_train=4, batch_size=2))
    rows = {int(r["step"]): r for r in csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))) if r["train/loss"]}
    assert float(rows[0]["train/kl"]) > 0 and float(rows[0]["train/abstained_groups"]) == 0
    assert float(rows[1]["train/abstained_groups"]) == 2 and rows[1]["train/kl"] == "nan"
    assert "train/kl" not in m.last_step_metrics
    # the kept rows' reward too: step 0 keeps every row (mean 0.5, std of [1, 0] * 4), step 1 none
    assert float(rows[0]["train/reward"]) == 0.5 and rows[1]["train/reward"] == "nan"
    assert float(rows[0]["train/reward_std"]) == pytest.approx(float(torch.tensor([1.0, 0.0] * 4).std()))
    assert rows[1]["train/reward_std"] == "nan" and "train/reward" not in m.last_step_metrics
    epoch = [r for r in csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))) if r.get("train/reward_epoch")]
    assert [float(r["train/reward_epoch"]) for r in epoch] == [0.5]  # the epoch's kept rows: step 0's alone
    assert [step for step, _ in logged_curves(trainer, ("train/kl",))["train/kl"]] == [0]


# ----------------------------------------------------------------------------- log-probs
#: how far the log-probs and entropies of sampling and of the training pass may lie from one fp32 full forward,
#: per dtype of the model passes (nats): fp32 summation order; bf16 autocast's 8-bit mantissa GEMM outputs
LOGPROB_ATOL = {"float32": 1e-4, "bfloat16": 2e-2}


@pytest.mark.parametrize("dtype", sorted(LOGPROB_ATOL))
@pytest.mark.parametrize("impl", ["fused", "materialized"])
def test_generate_signals_match_training_logprobs(dtype, impl):
    """Log-probs and entropies recorded by ``generate`` (KV cache, left padding) and the module's
    ``sequence_logprobs`` all equal those of one fp32 full forward + log_softmax over the vocabulary, within
    ``LOGPROB_ATOL`` of the dtype the passes ran in (fp32, or bf16 autocast as under a bf16-mixed trainer)."""
    import contextlib

    from tests.rollout._full_forward import full_forward_signals

    module = GRPOModule(policy=TINY, num_generations=3, sampling=SamplingSpec(temperature=1.0, max_new_tokens=8),
                        grpo=GRPOSpec(logprob_impl=impl))
    module.configure_model()
    passes = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext()
    eng = HFGenerateEngine(module.tokenizer, record_signals=True)
    with passes:
        r = eng.generate(module.policy, ["1+1=", "17-12="], SamplingParams(n=3, max_new_tokens=8, seed=0))
        with torch.no_grad():
            lp = module.sequence_logprobs(module.policy, r)
    ref = full_forward_signals(module.policy, r)
    m = r.completion_mask.bool()
    atol = LOGPROB_ATOL[dtype]
    torch.testing.assert_close(lp[m].double(), ref["logprob"][m], atol=atol, rtol=0)
    for k in ("logprob", "entropy"):
        torch.testing.assert_close(r.signals[k][m].double(), ref[k][m], atol=atol, rtol=0, msg=k)


# ----------------------------------------------------------------------------- fused log-probs
@pytest.mark.parametrize("untied", [False, True], ids=["tied_head", "untied_head_with_bias"])
def test_fused_grpo_step_equals_materialised_step(untied, monkeypatch):
    """One GRPO step (temperature 0.7, two iterations so the old log-probs and the clip take part; KL to
    a different reference) with the fused log-prob path gives the materialised path's loss and SGD update,
    for a tied head (tiny:qwen2) and an untied head with a bias (tiny:llama); the fused run never calls the
    models' own forward (the one that builds [R, C, V] logits)."""
    from tests.modules._models import untied_with_bias
    from ttrl_lightning.models import load_model

    arch = "tiny:llama" if untied else "tiny:qwen2"
    spec = PolicySpec(model=arch, seed=2)
    source = GRPOModule(policy=spec, num_generations=3, sampling=SamplingSpec(max_new_tokens=6))
    source.configure_model()
    rollouts = source.rollout({"prompt": ["1+2=", "30-4="]})
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])
    reference = load_model(arch, source.tokenizer, seed=5)
    policy = source.policy
    if untied:
        policy, reference = untied_with_bias(policy, seed=1), untied_with_bias(reference, seed=2)

    def step(impl):
        m = FixedBatch(policy=spec, num_generations=3, sampling=SamplingSpec(max_new_tokens=6, temperature=0.7),
                       grpo=GRPOSpec(kl_coef=0.5, reference="external", num_iterations=2, max_grad_norm=None,
                                     logprob_impl=impl))
        m.fixed, m.fixed_rewards = rollouts, rewards
        m.policy = copy.deepcopy(policy)
        m.set_reference_model(reference)
        before = {k: v.detach().clone() for k, v in m.policy.named_parameters()}
        trainer = _trainer(1)
        trainer.fit(m, PromptDataModule(n_train=4, batch_size=2))
        delta = {k: v.detach() - before[k] for k, v in m.policy.named_parameters()}
        return m, delta, trainer.callback_metrics

    ref_m, ref_delta, ref_logs = step("materialized")
    calls = []
    cls = type(policy)
    real_forward = cls.forward
    monkeypatch.setattr(cls, "forward", lambda self, *a, **k: calls.append(1) or real_forward(self, *a, **k))
    m, delta, logs = step("auto")
    assert calls == [] and m.logprob_path.noticed == set()
    for k in ("train/loss", "train/kl", "train/clip_frac"):
        torch.testing.assert_close(logs[k], ref_logs[k], rtol=1e-5, atol=1e-6, msg=k)
    assert float(logs["train/kl"]) > 1e-4  # the reference differs: the KL term takes part
    head = "lm_head.weight" if untied else "model.embed_tokens.weight"
    assert float(ref_delta[head].abs().max()) > 1e-3
    for k in ref_delta:  # updates reach ~1; fp32 summation order leaves a few 1e-6 apart
        torch.testing.assert_close(delta[k], ref_delta[k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.parametrize("impl", ["fused", "materialized"])
def test_raw_logprobs_come_from_the_same_forward_as_the_tempered_ones(impl):
    """``sequence_logprobs(raw=True)``: the tempered log-probs (with gradient) and the raw ones (temperature 1, no
    gradient, what the TIS weight compares with the sampler's) equal two separate passes."""
    m = GRPOModule(policy=TINY, sampling=SamplingSpec(temperature=0.7), grpo=GRPOSpec(logprob_impl=impl))
    m.configure_model()
    r = HFGenerateEngine(m.tokenizer).generate(m.policy, ["1+2=", "9-3="], SamplingParams(n=2, max_new_tokens=5,
                                                                                            seed=0))
    logp, raw = m.sequence_logprobs(m.policy, r, raw=True)
    assert logp.requires_grad and not raw.requires_grad
    torch.testing.assert_close(logp, m.sequence_logprobs(m.policy, r), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(raw, m.sequence_logprobs(m.policy, r, temperature=1.0), rtol=1e-5, atol=1e-5)
    keep = r.completion_mask.bool()
    assert (raw[keep] - logp[keep]).abs().max() > 1e-3  # T 0.7 is not T 1


def test_tis_weight_is_not_logged_on_a_step_that_trains_no_token():
    """A mean over no token is not 0: with every group abstaining the step logs the gap but no TIS weight."""
    from ttrl_lightning.modules.step_records import SamplerCorrection

    corr = SamplerCorrection(torch.full((2, 3), 2.0), torch.tensor(0.5))
    assert set(corr.metrics(torch.zeros(2, 3))) == {"train/sampler_logprob_gap"}
    assert corr.metrics(torch.ones(2, 3))["train/tis_weight"] == pytest.approx(2.0)


def test_activation_checkpointing_recomputes_layers_and_leaves_the_step_unchanged():
    """policy.activation_checkpointing: the same GRPO update (two iterations, KL to another reference) as
    without it, while the first decoder layer runs again in every backward (recomputed, not kept); sampling and
    the no-grad passes run it once."""
    from ttrl_lightning.models import load_model

    spec = PolicySpec(model="tiny:qwen2", seed=2)
    source = GRPOModule(policy=spec, num_generations=3, sampling=SamplingSpec(max_new_tokens=6))
    source.configure_model()
    rollouts = source.rollout({"prompt": ["1+2=", "30-4="]})
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])
    reference = load_model("tiny:qwen2", source.tokenizer, seed=5)

    def step(checkpointing):
        s = PolicySpec(model="tiny:qwen2", seed=2, activation_checkpointing=checkpointing)
        m = FixedBatch(policy=s, num_generations=3, sampling=SamplingSpec(max_new_tokens=6, temperature=0.7),
                       grpo=GRPOSpec(kl_coef=0.5, reference="external", num_iterations=2, max_grad_norm=None))
        m.fixed, m.fixed_rewards = rollouts, rewards
        m.configure_model()  # builds the policy (and turns checkpointing on), then its weights are replaced
        m.policy.load_state_dict(source.policy.state_dict())
        m.set_reference_model(reference)
        calls = []  # the first layer's MLP, counted by a wrapped forward (checkpoint recomputes skip hooks)
        mlp = m.policy.model.layers[0].mlp
        mlp.forward = (lambda f: lambda *a, **k: calls.append(torch.is_grad_enabled()) or f(*a, **k))(mlp.forward)
        before = {k: v.detach().clone() for k, v in m.policy.named_parameters()}
        _trainer(1).fit(m, PromptDataModule(n_train=4, batch_size=2))
        return {k: v.detach() - before[k] for k, v in m.policy.named_parameters()}, calls

    plain, plain_calls = step(False)
    checked, checked_calls = step(True)
    # two training forwards with gradients (one per iteration); checkpointing runs the layer again in each
    # backward; the no-grad pass (the old policy's log-probs) runs it once either way
    assert plain_calls.count(True) == 2 and checked_calls.count(True) == 4
    assert plain_calls.count(False) == checked_calls.count(False) >= 1
    assert float(plain["model.embed_tokens.weight"].abs().max()) > 1e-3
    for k in plain:
        torch.testing.assert_close(checked[k], plain[k], rtol=1e-5, atol=1e-6, msg=k)

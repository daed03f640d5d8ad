"""``GRPOModule``: group-relative policy optimisation with a token-level k3 KL to a reference.

One training step (``training_step``), each part a short overridable hook:

    rollouts   = self.rollout(batch)                  # N samples per prompt (rollout engine)
    rewards    = self.score(rollouts, batch)          # [R] from reward callables (rewards/base.py)
    advantages = self.compute_advantages(rewards.view(G, N)).view(R)
    for it in range(num_iterations):                  # optimizer steps on this rollout batch
        logp   = self.sequence_logprobs(self.policy, rollouts)        # [R, C]
        loss   = aggregate(self.policy_loss(logp, old_logp, advantages) + beta * self.kl_penalty(logp, ref))

CC-RFT and TTRL subclass it and override ``score`` (curiosity/coherence rewards, pseudo-labels) or
``compute_advantages`` (value-weighted baselines) without copying the step. The KL reference is a frozen
copy of the initial policy (``reference="initial"``), or the EMA policy set by the ``EMAAnchor`` callback;
``beta`` (``self.kl_coef``) is fixed or driven by the ``PIDKLController`` callback, which reads
``self.kl_observation`` (mean token KL of the last step) after every batch.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import torch
from torchmetrics import MeanMetric

from ttrl_lightning.modules.base import PolicyModule
from ttrl_lightning.modules.losses import (
    LOSS_AGGREGATIONS,
    clipped_policy_loss,
    completion_logprobs,
    group_advantages,
    k3_kl,
)
from ttrl_lightning.rewards.base import RewardFn, call_reward, resolve_reward
from ttrl_lightning.rollout.base import RolloutEngine, Rollouts, SamplingParams
from ttrl_lightning.rollout.hf import HFGenerateEngine

REFERENCES = ("initial", "none", "external")


class GRPOModule(PolicyModule):
    """GRPO (DeepSeekMath; Pixelis 3.2.2 and appendix 6).

    Args beyond ``PolicyModule``: ``num_generations`` N samples per prompt; decoding ``temperature``,
    ``top_p``, ``top_k``, ``max_new_tokens``, ``stop``; ``rewards`` (registry names or callables) with
    ``reward_weights``; ``scale_rewards`` (divide by group std); ``eps_low``/``eps_high`` clip range;
    ``kl_coef`` initial beta; ``reference``: ``"initial"`` (frozen copy of the starting policy, checkpointed),
    ``"external"`` (set by a callback such as ``EMAAnchor``) or ``"none"`` (no KL term, kl_coef must be 0);
    ``loss_aggregation``: ``"seq_mean"`` or ``"token_mean"``; ``num_iterations`` optimizer steps per rollout
    batch (> 1 makes the clip active); ``max_grad_norm``.
    Batch: ``{"prompt": [str], <other columns>: [...]}``; other columns are passed to the rewards.
    """

    def __init__(
        self,
        model: str = "tiny:qwen2",
        tiny_kwargs: dict[str, Any] | None = None,
        lora: dict[str, Any] | None = None,
        dtype: str | None = None,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        seed: int = 0,
        num_generations: int = 4,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 8,
        stop: Sequence[str] = (),
        rewards: Sequence[str | RewardFn] = ("exact_answer",),
        reward_weights: Sequence[float] | None = None,
        scale_rewards: bool = True,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        kl_coef: float = 0.04,
        reference: str = "initial",
        loss_aggregation: str = "seq_mean",
        num_iterations: int = 1,
        max_grad_norm: float | None = 1.0,
        record_signals: bool = False,
        engine: RolloutEngine | None = None,
    ):
        super().__init__(model, tiny_kwargs, lora, dtype, lr, weight_decay, betas, seed)
        self.save_hyperparameters(ignore=["rewards", "engine"])
        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
        if reference == "none" and kl_coef != 0:
            raise ValueError("reference='none' needs kl_coef=0")
        if num_iterations < 1:
            raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
        LOSS_AGGREGATIONS[loss_aggregation]  # fail early on a typo
        self.automatic_optimization = False
        self.reward_fns: list[RewardFn] = [resolve_reward(r) for r in rewards]
        if not self.reward_fns:
            raise ValueError("at least one reward is needed")
        w = list(reward_weights) if reward_weights is not None else [1.0] * len(self.reward_fns)
        if len(w) != len(self.reward_fns):
            raise ValueError(f"{len(w)} reward_weights for {len(self.reward_fns)} rewards")
        self.register_buffer("reward_weights", torch.tensor(w, dtype=torch.float32), persistent=False)
        self.engine: RolloutEngine = engine or HFGenerateEngine(self.tokenizer, record_signals=record_signals)
        self.kl_coef = float(kl_coef)
        self.kl_observation: torch.Tensor | None = None
        self._reference: list[torch.nn.Module] = []  # a list keeps it out of this module's parameters
        self._pending_reference_state: dict | None = None
        self.train_reward = MeanMetric()
        self.val_accuracy = MeanMetric()

    # ------------------------------------------------------------------ reference model
    def set_reference_model(self, model: torch.nn.Module | None) -> None:
        """Use ``model`` (frozen, not trained, not checkpointed here) as the KL reference."""
        self._reference = [] if model is None else [model]

    @property
    def reference_model(self) -> torch.nn.Module | None:
        return self._reference[0] if self._reference else None

    def on_fit_start(self) -> None:
        ref = self.hparams.reference
        if ref == "external" and self.reference_model is None:
            raise RuntimeError("reference='external' but no callback (e.g. EMAAnchor) set a reference model")
        if ref == "initial" and self.reference_model is None:
            frozen = copy.deepcopy(self.policy).eval().requires_grad_(False)
            if self._pending_reference_state is not None:
                frozen.load_state_dict(self._pending_reference_state)
                self._pending_reference_state = None
            self.set_reference_model(frozen)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["grpo"] = {"kl_coef": self.kl_coef}
        if self.hparams.reference == "initial" and self.reference_model is not None:
            checkpoint["grpo"]["reference_state"] = self.reference_model.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("grpo", {})
        self.kl_coef = float(state.get("kl_coef", self.kl_coef))
        if "reference_state" in state:
            if self.reference_model is not None:
                self.reference_model.load_state_dict(state["reference_state"])
            else:
                self._pending_reference_state = state["reference_state"]

    # ------------------------------------------------------------------ hooks
    def sampling_params(self, seed: int | None) -> SamplingParams:
        h = self.hparams
        return SamplingParams(n=h.num_generations, temperature=h.temperature, top_p=h.top_p, top_k=h.top_k,
                              max_new_tokens=h.max_new_tokens, stop=tuple(h.stop), seed=seed)

    def rollout_seed(self) -> int:
        """Seed of this step's sampling: a function of (seed, global_step, rank), so resumes replay it."""
        return int(self.hparams.seed) * 1_000_003 + int(self.global_step) * 997 + int(self.global_rank)

    def rollout(self, batch: dict[str, list]) -> Rollouts:
        """Sample N completions per prompt of ``batch["prompt"]``."""
        return self.engine.generate(self.policy, batch["prompt"], self.sampling_params(self.rollout_seed()))

    def score(self, rollouts: Rollouts, batch: dict[str, list]) -> torch.Tensor:
        """Rewards [R]: weighted sum of the reward callables, batch columns repeated N times per prompt."""
        n = rollouts.n
        prompts = [p for p in batch["prompt"] for _ in range(n)]
        columns = {k: [v for v in vals for _ in range(n)] for k, vals in batch.items() if k != "prompt"}
        ids = [row[: int(m.sum())].tolist() for row, m in zip(rollouts.completion_ids, rollouts.completion_mask)]
        per_fn = torch.stack([call_reward(fn, prompts, rollouts.texts, completion_ids=ids, **columns)
                              for fn in self.reward_fns], dim=1)  # [R, F]
        return (per_fn.to(self.reward_weights.device) * self.reward_weights).sum(1)

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """rewards [G, N] -> advantages [G, N] (group-relative)."""
        return group_advantages(rewards, scale=self.hparams.scale_rewards)

    def policy_loss(self, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor) -> dict:
        """Token-level clipped surrogate [R, C] (+ the clip indicator)."""
        loss, clipped = clipped_policy_loss(logp, old_logp, advantages, self.hparams.eps_low, self.hparams.eps_high)
        return {"pg": loss, "clipped": clipped}

    def kl_penalty(self, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        """Token-level KL(pi_theta || pi_ref), k3 estimator, [R, C]."""
        return k3_kl(logp, ref_logp)

    # ------------------------------------------------------------------ log-probs
    def sequence_logprobs(self, model: torch.nn.Module, rollouts: Rollouts) -> torch.Tensor:
        """log pi(completion token | prefix) [R, C] under ``model`` (sampling temperature applied)."""
        ids, attn = rollouts.input_ids(), rollouts.attention_mask()
        C = rollouts.completion_ids.shape[1]
        pos = (attn.long().cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=C + 1).logits[:, :-1]
        t = self.hparams.temperature
        if t > 0:
            logits = logits / t
        return completion_logprobs(logits, rollouts.completion_ids)

    # ------------------------------------------------------------------ the step
    def training_step(self, batch, batch_idx):
        rollouts = self.rollout(batch)
        R, n = rollouts.completion_ids.shape[0], rollouts.n
        rewards = self.score(rollouts, batch).to(self.device)
        advantages = self.compute_advantages(rewards.view(R // n, n)).reshape(R)
        mask = rollouts.completion_mask.float()
        use_kl = self.hparams.reference != "none"
        with torch.no_grad():
            ref_logp = self.sequence_logprobs(self.reference_model, rollouts) if use_kl else None
            old_logp = self.sequence_logprobs(self.policy, rollouts) if self.hparams.num_iterations > 1 else None
        agg = LOSS_AGGREGATIONS[self.hparams.loss_aggregation]
        opt = self.optimizers()
        for _ in range(self.hparams.num_iterations):
            logp = self.sequence_logprobs(self.policy, rollouts)
            parts = self.policy_loss(logp, logp.detach() if old_logp is None else old_logp, advantages)
            token_loss = parts["pg"]
            if use_kl:
                kl = self.kl_penalty(logp, ref_logp)
                token_loss = token_loss + self.kl_coef * kl
            loss = agg(token_loss, mask)
            opt.zero_grad()
            self.manual_backward(loss)
            if self.hparams.max_grad_norm:
                self.clip_gradients(opt, gradient_clip_val=self.hparams.max_grad_norm, gradient_clip_algorithm="norm")
            opt.step()
        self.engine.sync_weights(self.policy)
        with torch.no_grad():
            kl_mean = token_mean_of(kl.detach(), mask) if use_kl else torch.zeros((), device=self.device)
            self.kl_observation = kl_mean
            self.train_reward(rewards)
            self.log("train/reward", self.train_reward, on_step=True, on_epoch=True, prog_bar=True)
            self.log_dict({
                "train/loss": loss.detach(),
                "train/kl": kl_mean,
                "train/beta": torch.tensor(self.kl_coef),
                "train/clip_frac": token_mean_of(parts["clipped"].float(), mask),
                "train/completion_len": mask.sum(1).mean(),
                "train/reward_std": rewards.std() if R > 1 else torch.zeros(()),
                "train/rollout_tokens": torch.tensor(float(rollouts.num_completion_tokens)),
            })
        return loss.detach()

    def validation_step(self, batch, batch_idx):
        h = self.hparams
        params = SamplingParams(n=1, temperature=0.0, max_new_tokens=h.max_new_tokens, stop=tuple(h.stop))
        rollouts = self.engine.generate(self.policy, batch["prompt"], params)
        rewards = self.score(rollouts, batch)
        self.val_accuracy(rewards)
        self.log("val/reward", self.val_accuracy, on_epoch=True, prog_bar=True)


def token_mean_of(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)

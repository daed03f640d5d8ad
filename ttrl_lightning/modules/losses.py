"""Pure loss functions of the training modules (no state; shapes in each docstring).

SFT (Pixelis 3.2.1): action-weighted next-token cross-entropy and feedback dropout.
GRPO (DeepSeekMath, Pixelis 3.2.2 / appendix 6): group-relative advantages, clipped policy loss, the k3
KL estimator and the token-loss aggregations.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ttrl_lightning.masking import IGNORE_INDEX, masked_token_mean
from ttrl_lightning.registry import Registry


def _check_finite(name: str, x: torch.Tensor) -> None:
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} has NaN or inf values")


# ----------------------------------------------------------------------------------------------- SFT
def action_weighted_ce(
    logits: torch.Tensor, labels: torch.Tensor, action_mask: torch.Tensor, w_act: float = 2.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Next-token CE with action tokens up-weighted (Pixelis 3.2.1).

    logits: [B, T, V] (position t predicts token t+1); labels: [B, T] (``IGNORE_INDEX`` = no loss);
    action_mask: [B, T] (True where token t is part of a tool name/argument).
    With CE_t = -log softmax(logits[:, t-1])[labels[:, t]] and w_t = (w_act if action_t else 1) for t with a
    label:  loss = sum_t w_t CE_t / sum_t w_t   (a weighted mean, so the loss scale does not depend on w_act).
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2] or action_mask.shape != labels.shape:
        raise ValueError(f"shapes: logits {tuple(logits.shape)} [B,T,V], labels {tuple(labels.shape)} [B,T], "
                         f"action_mask {tuple(action_mask.shape)} [B,T]")
    lg = logits[:, :-1].float()
    tgt = labels[:, 1:]
    ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), ignore_index=IGNORE_INDEX,
                         reduction="none").view_as(tgt)
    return _action_weighted_mean(ce, labels, action_mask, w_act)


def action_weighted_nll(
    label_logprobs: torch.Tensor, labels: torch.Tensor, action_mask: torch.Tensor, w_act: float = 2.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``action_weighted_ce`` from the log-probs of the labels instead of the logits: CE_t = -logprob_t.

    label_logprobs: [B, T-1], entry t-1 = log p(labels[:, t] | tokens < t) (e.g. ``ops.linear_logprobs`` of
    the hidden states at positions 0..T-2 with targets ``labels[:, 1:]``; positions without a label are not
    read); labels, action_mask: [B, T]. Same weighting and statistics as ``action_weighted_ce``.
    """
    B, T = labels.shape
    if label_logprobs.shape != (B, T - 1) or action_mask.shape != labels.shape:
        raise ValueError(f"shapes: label_logprobs {tuple(label_logprobs.shape)} [B,T-1], labels "
                         f"{tuple(labels.shape)} [B,T], action_mask {tuple(action_mask.shape)} [B,T]")
    valid = labels[:, 1:] != IGNORE_INDEX
    ce = torch.where(valid, -label_logprobs.float(), torch.zeros((), device=label_logprobs.device))
    return _action_weighted_mean(ce, labels, action_mask, w_act)


def _action_weighted_mean(ce: torch.Tensor, labels: torch.Tensor, action_mask: torch.Tensor,
                          w_act: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """sum_t w_t CE_t / sum_t w_t over the labelled positions (ce: [B, T-1], 0 where there is no label),
    and the mean CE of text and action tokens."""
    if w_act <= 0:
        raise ValueError(f"w_act must be > 0, got {w_act}")
    tgt = labels[:, 1:]
    act = action_mask[:, 1:].bool()
    valid = tgt != IGNORE_INDEX
    if not valid.any():
        raise ValueError("batch has no label tokens")
    w = torch.where(act, torch.full_like(ce, w_act), torch.ones_like(ce)) * valid
    loss = (w * ce).sum() / w.sum()
    with torch.no_grad():
        stats = {"ce_text": masked_token_mean(ce, valid & ~act),
                 "ce_action": masked_token_mean(ce, valid & act)}
    return loss, stats


def feedback_dropout(
    input_ids: torch.Tensor, observation_span: torch.Tensor, p: float, hide_id: int,
    generator: torch.Generator | None
) -> torch.Tensor:
    """Hide whole observations (tool outputs) with probability ``p`` each (Pixelis 3.2.1, default 5%).

    input_ids, observation_span: [B, T]; observation_span holds k >= 1 on the tokens of the k-th
    observation of a row (0 elsewhere). Each (row, k) span is hidden independently: its tokens become
    ``hide_id`` (length kept, so later positions and labels do not move). Returns a new tensor; ``p == 0``
    returns the input unchanged.
    """
    if not 0 <= p <= 1:
        raise ValueError(f"feedback dropout p must be in [0, 1], got {p}")
    if input_ids.shape != observation_span.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and observation_span "
                         f"{tuple(observation_span.shape)} disagree")
    if p == 0 or observation_span.max() <= 0:
        return input_ids
    B, K = observation_span.shape[0], int(observation_span.max())
    drop = torch.rand(B, K + 1, generator=generator, device="cpu").to(observation_span.device) < p
    drop[:, 0] = False  # span id 0 = not an observation
    hide = drop.gather(1, observation_span)
    return torch.where(hide, torch.full_like(input_ids, hide_id), input_ids)


# ---------------------------------------------------------------------------------------------- GRPO
def group_advantages(rewards: torch.Tensor, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """rewards: [G, N] (G prompts x N samples) -> advantages [G, N].

    A_gi = (r_gi - mean_i r_gi) / (std_i r_gi + eps) (sample std, as DeepSeekMath's GRPO); ``scale=False``
    keeps only the mean-centring (Dr. GRPO). A group with identical rewards gets A = 0.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [G, N], got {tuple(rewards.shape)}")
    _check_finite("rewards", rewards)
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale:
        return centred
    std = rewards.std(dim=1, keepdim=True) if rewards.shape[1] > 1 else torch.zeros_like(rewards[:, :1])
    return centred / (std + eps)


def clipped_policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float = 0.2,
    eps_high: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO/GRPO clipped surrogate per token.

    logp, old_logp: [R, C]; advantages: [R] (one per sequence). With rho = exp(logp - old_logp):
    L_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A). Returns (L [R, C], clipped [R, C] bool).
    """
    if logp.shape != old_logp.shape or advantages.shape != logp.shape[:1]:
        raise ValueError(f"shapes: logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, "
                         f"advantages {tuple(advantages.shape)} (want [R, C], [R, C], [R])")
    ratio = torch.exp(logp - old_logp)
    a = advantages.unsqueeze(1)
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * a
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) on tokens sampled from pi (Schulman 2020):
    k3 = exp(ref - logp) - (ref - logp) - 1 >= 0, unbiased, with gradient of the reverse KL. Shapes [R, C]."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def truncated_importance_weights(
    logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, cap: float | None = 2.0
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Truncated importance sampling between the policy and the engine that sampled from its own copy of it
    (TIS, Yao et al. 2025; verl's / TRL's rollout importance-sampling correction).

    logp, sampler_logp: [R, C] log-probs of the sampled tokens under the policy and under the sampler; mask:
    [R, C] the completion tokens. Returns ``(w, gap)``: ``w = min(exp(logp - sampler_logp), cap)`` on the
    masked tokens and 1 elsewhere (None when ``cap`` is None), no gradient; ``gap = mean |logp - sampler_logp|``
    over the masked tokens (0 when there are none). A NaN or infinite log-prob on a masked token is an
    error."""
    if logp.shape != sampler_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"shapes: logp {tuple(logp.shape)}, sampler_logp {tuple(sampler_logp.shape)}, "
                         f"mask {tuple(mask.shape)} (want the same [R, C])")
    keep = mask.bool()
    diff = torch.where(keep, logp.detach().float() - sampler_logp.float(), torch.zeros((), device=logp.device))
    _check_finite("policy - sampler log-prob", diff)
    gap = masked_token_mean(diff.abs(), keep)
    if cap is None:
        return None, gap
    weights = torch.where(keep, torch.exp(diff).clamp(max=cap), torch.ones((), device=logp.device))
    return weights, gap


LOSS_AGGREGATIONS: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry(
    "loss aggregation")


@LOSS_AGGREGATIONS.register("token_mean")
def token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x, mask: [R, C] -> sum(x * m) / sum(m) (every token weighs the same; DAPO):
    ``masking.masked_token_mean``."""
    return masked_token_mean(x, mask)


@LOSS_AGGREGATIONS.register("seq_mean")
def seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x, mask: [R, C] -> mean over the S sequences with a masked token of sum_t x m / sum_t m (every
    sequence weighs the same; GRPO paper). A row without a masked token (a masked-out group's row) is
    left out of the mean, so it changes neither the loss nor its scale."""
    mask = mask.to(x.dtype)
    counts = mask.sum(1)
    per_seq = (x * mask).sum(1) / counts.clamp(min=1)
    return per_seq.sum() / (counts > 0).sum().clamp(min=1)


def completion_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """logits: [R, C, V] predicting ids: [R, C] -> log p(ids) [R, C] = z_y - logsumexp(z), in float32.

    The materialised path of ``GRPOModule.sequence_logprobs``; its fused path (``modules.logprobs``,
    ``ops.linear_logprobs``) gives the same values from the hidden states without [R, C, V] logits.
    """
    if logits.shape[:2] != ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and ids {tuple(ids.shape)} disagree")
    z = logits.float()
    return z.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)

"""An independent oracle for per-token signals of rollouts: one full forward + log_softmax, in float64."""
from __future__ import annotations

import math

import torch


def full_forward_signals(model, r) -> dict[str, torch.Tensor]:
    """Signals of the completion tokens of ``r`` (a ``Rollouts``) under ``model`` at temperature 1.

    One forward over prompt + completion (no KV cache, no ``logits_to_keep``), position t predicting token
    t + 1, then over the whole vocabulary V: ``logprob`` = log p(token), ``entropy`` = -sum p log p,
    ``self_certainty`` = KL(U || p) = -(1/V) sum log p - log V. Returns float64 [R, C] tensors.
    """
    ids = torch.cat([r.prompt_ids, r.completion_ids], 1)
    attn = torch.cat([r.prompt_mask, r.completion_mask], 1).long()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits.double()
    P = r.prompt_ids.shape[1]
    logp = torch.log_softmax(logits[:, P - 1:-1], dim=-1)  # [R, C, V]
    return {
        "logprob": logp.gather(-1, r.completion_ids[..., None])[..., 0],
        "entropy": -(logp.exp() * logp).sum(-1),
        "self_certainty": -logp.mean(-1) - math.log(logp.shape[-1]),
    }

"""Plain PyTorch reference of ``linear_logprobs`` (tests and benchmarks only).

It materialises the ``[M, V]`` logits in float32 and lets autograd differentiate ``log_softmax`` and
``gather``, so it is the independent oracle the chunked backends (values and gradients) are compared with.
Never use it on large inputs: it holds several ``[M, V]`` tensors.
"""
from __future__ import annotations

import torch


def linear_logprobs_reference(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    token_ids: torch.Tensor,
    temperature: float = 1.0,
    bias: torch.Tensor | None = None,
    return_entropy: bool = False,
):
    """``logprob_i = log softmax(z_i)[y_i]`` with ``z = (hidden @ weight.T + bias) / temperature`` (float32).

    hidden: [M, H], weight: [V, H], token_ids: [M] (negative = no label: logprob 0), bias: [V] or None.
    With ``return_entropy`` also returns ``entropy_i = -sum_v p_iv log p_iv``. Differentiable by autograd.
    """
    z = hidden.float() @ weight.float().t()
    if bias is not None:
        z = z + bias.float()
    logp = torch.log_softmax(z / float(temperature), dim=-1)
    labels = token_ids.long()
    picked = logp.gather(1, labels.clamp_min(0)[:, None])[:, 0]
    logprob = torch.where(labels >= 0, picked, torch.zeros_like(picked))
    if not return_entropy:
        return logprob
    return logprob, -(logp.exp() * logp).sum(-1)

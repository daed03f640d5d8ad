"""Functional API of the fused signal ops (the names and signatures are the contract).

Both ops validate their inputs, dispatch to the backend chosen in ``backends`` and check the output for
non-finite values (which only NaN/inf inputs or overflowing logits can produce).
"""
from __future__ import annotations

import torch

from . import backends
from .checks import (
    check_attention_inputs,
    check_attention_outputs,
    check_token_stats_inputs,
    check_token_stats_outputs,
)


def token_stats(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    token_ids: torch.Tensor,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    *,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused linear + online log-sum-exp over vocabulary blocks; never holds an ``[M, V]`` tensor.

    hidden: [M, H], weight: [V, H] (the LM head), token_ids: [M] (ids < 0 = no label), bias: [V] or None.
    With z = (hidden @ weight.T + bias) / temperature and lse = logsumexp(z), returns float32 [M] tensors
      logprob = z_y - lse (0 where token_ids < 0),
      entropy = lse - sum_j softmax(z)_j z_j,
      self_certainty = lse - mean(z) - log V = KL(U || p)   (Kang et al. 2025; VisConf Sec. 3),
      lse,
    where mean(z) = (hidden . mean_rows(weight) + mean(bias)) / temperature is one mat-vec.
    ``backend`` overrides the backend for this call (``triton``, ``cuda``, ``cpp``, ``torch``).
    Forward only: the results carry no gradient.
    """
    check_token_stats_inputs(hidden, weight, token_ids, bias, temperature)
    if hidden.shape[0] == 0:
        z = torch.zeros(0, device=hidden.device)
        return z, z.clone(), z.clone(), z.clone()
    fn = backends.pick("token_stats", hidden.device.type, backend)
    with torch.no_grad():  # forward only: scoring signals carry no gradient
        logprob, entropy, self_certainty, lse = fn(hidden, weight, token_ids, bias, float(temperature))
    check_token_stats_outputs(lse)
    return logprob, entropy, self_certainty, lse


def attention_with_mass(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_groups: torch.Tensor,
    num_groups: int,
    causal: bool = True,
    scale: float | None = None,
    *,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention plus the attention probability mass on each key group, in one streaming pass.

    q: [B, Hq, Tq, d], k/v: [B, Hkv, Tk, d] (GQA when Hq is a multiple of Hkv), key_groups: [B, Tk] with
    values in [0, num_groups) or -1 for padding (masked out). Causal masks are aligned bottom-right: query i
    sees keys j <= i + Tk - Tq. scale defaults to 1/sqrt(d).
    Returns out: [B, Hq, Tq, d] (q.dtype) and mass: [B, Hq, Tq, num_groups] float32 with
    mass[..., g] = sum_{j in group g} softmax_j(q k_j^T * scale); the masses of a row sum to 1 (rows that see
    no key, e.g. left padding under a causal mask, get out = 0 and mass = 0).
    Per-token group masses averaged over layers and heads give VisConf's visual engagement
    v_t = A_I / (A_I + A_P + A_G) (VisConf Sec. 3) and LookBack's image-attention mass A_t.
    When gradients are needed (grad mode on and q/k/v require grad) the call uses the differentiable
    ``torch`` backend, so ``out`` can be trained through; ``mass`` is always detached.
    """
    check_attention_inputs(q, k, v, key_groups, num_groups)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # the kernels are forward-only; SDPA with indicator channels is differentiable (the mass is detached)
        backend = "torch"
    fn = backends.pick("attention_with_mass", q.device.type, backend)
    out, mass = fn(q, k, v, key_groups, int(num_groups), bool(causal), scale)
    mass = mass.detach()
    check_attention_outputs(mass)
    return out, mass

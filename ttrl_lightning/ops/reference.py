"""Plain PyTorch references for the fused signal ops (used by tests and benchmarks).

They materialise everything (``[M, V]`` logits, ``[B, H, Tq, Tk]`` attention probabilities) in float32, so
they are the independent oracle the streaming backends are compared with. Never use them on large inputs.
"""
from __future__ import annotations

import math

import torch


def token_stats_reference(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    token_ids: torch.Tensor,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token statistics of ``z = (hidden @ weight.T + bias) / temperature`` from full logits.

    hidden: [M, H], weight: [V, H], token_ids: [M] (negative = no label), bias: [V] or None.
    Returns float32 [M] tensors:
      lse = log sum_j exp z_j; logprob = z_y - lse (0 where token_ids < 0);
      entropy = -sum_j p_j log p_j; self_certainty = KL(U || p) = -(1/V) sum_j log p_j - log V
      (Self-Certainty, Kang et al. 2025; VisConf Sec. 3).
    """
    z = hidden.float() @ weight.float().t()
    if bias is not None:
        z = z + bias.float()
    z = z / float(temperature)
    logp = torch.log_softmax(z, dim=-1)
    lse = torch.logsumexp(z, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    self_certainty = -logp.mean(-1) - math.log(z.shape[-1])
    labels = token_ids.long()
    has_label = labels >= 0
    picked = logp.gather(1, labels.clamp_min(0)[:, None])[:, 0]
    logprob = torch.where(has_label, picked, torch.zeros_like(picked))
    return logprob, entropy, self_certainty, lse


def attention_probs_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    key_groups: torch.Tensor,
    causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """Full attention probabilities ``p: [B, Hq, Tq, Tk]`` (float32) with GQA, padding and bottom-right causal mask.

    Query i sees key j iff key_groups[b, j] >= 0 and (not causal or j <= i + Tk - Tq).
    Rows that see no key are all zeros.
    """
    B, Hq, Tq, d = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    kk = k.float().repeat_interleave(Hq // Hkv, dim=1)
    s = (q.float() @ kk.transpose(-1, -2)) * scale
    visible = (key_groups >= 0)[:, None, None, :].expand(B, 1, Tq, Tk)
    if causal:
        i = torch.arange(Tq, device=q.device)[:, None]
        j = torch.arange(Tk, device=q.device)[None, :]
        visible = visible & (j <= i + (Tk - Tq))[None, None]
    s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.nan_to_num(p, nan=0.0)


def attention_with_mass_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_groups: torch.Tensor,
    num_groups: int,
    causal: bool = True,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention plus per-group probability mass, from the materialised ``[B, Hq, Tq, Tk]`` map.

    out[b,h,i] = sum_j p[b,h,i,j] v[b,h//r,j]  (r = Hq / Hkv),
    mass[b,h,i,g] = sum_{j: key_groups[b,j] = g} p[b,h,i,j].
    Returns (out in q.dtype, mass float32).
    """
    p = attention_probs_reference(q, k, key_groups, causal, scale)
    Hq, Hkv = q.shape[1], k.shape[1]
    vv = v.float().repeat_interleave(Hq // Hkv, dim=1)
    out = p @ vv
    onehot = torch.nn.functional.one_hot(key_groups.long().clamp_min(0), num_groups).float()
    onehot = onehot * (key_groups >= 0)[..., None].float()  # [B, Tk, G]
    mass = torch.einsum("bhqk,bkg->bhqg", p, onehot)
    return out.to(q.dtype), mass

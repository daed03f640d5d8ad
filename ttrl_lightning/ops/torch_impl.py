"""Chunked PyTorch backend ("torch"): runs on any device, never materialises ``[M, V]`` or ``[Tq, Tk]``.

* ``token_stats``: vocabulary blocks of ``block_v`` columns (and token chunks so a tile holds at most
  ``tile_elems`` floats); per tile one GEMM and an online log-sum-exp update of (max m, s = sum e^{z-m},
  t = sum z e^{z-m}); the label logit is gathered from the tile that holds it.
* ``attention_with_mass``: the indicator-channel trick: one extra value channel per key group holding
  1[key in group] (q and k padded with zeros to the same head dim, rounded up to a multiple of 16, so
  scores are unchanged); a single fused SDPA call then returns the output in the first d channels and the
  group masses in the next G. Forward-only calls run a few heads at a time through padded buffers that
  are allocated once and refilled (``chunk_elems`` floats each), which keeps the padded copies small.
  Padding or a bottom-right causal mask with Tq != Tk use query chunks with a per-chunk boolean mask
  (``[B, 1, chunk, Tk]``, never ``[Tq, Tk]``).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def token_stats_torch(hidden, weight, token_ids, bias=None, temperature=1.0, block_v=2048, tile_elems=1 << 23):
    M, H = hidden.shape
    V = weight.shape[0]
    inv_t = 1.0 / float(temperature)
    h = hidden.float() * inv_t  # z = h' W^T + b/T
    ids = token_ids.long()
    dev = hidden.device
    m = torch.full((M,), float("-inf"), device=dev)
    s = torch.zeros(M, device=dev)
    t = torch.zeros(M, device=dev)
    zy = torch.zeros(M, device=dev)
    wsum = torch.zeros(H, device=dev)
    rows = max(1, min(M, tile_elems // block_v))
    for v0 in range(0, V, block_v):
        v1 = min(V, v0 + block_v)
        w = weight[v0:v1].float()
        wsum += w.sum(0)
        b = bias[v0:v1].float() * inv_t if bias is not None else None
        for r0 in range(0, M, rows):
            r1 = min(M, r0 + rows)
            z = h[r0:r1] @ w.t()
            if b is not None:
                z += b
            m_old = m[r0:r1]
            m_new = torch.maximum(m_old, z.amax(1))
            alpha = torch.exp(m_old - m_new)
            e = torch.exp(z - m_new[:, None])
            s[r0:r1] = s[r0:r1] * alpha + e.sum(1)
            t[r0:r1] = t[r0:r1] * alpha + torch.bmm(e.unsqueeze(1), z.unsqueeze(2)).view(-1)
            m[r0:r1] = m_new
            lab = ids[r0:r1]
            here = (lab >= v0) & (lab < v1)
            if bool(here.any()):
                idx = here.nonzero()[:, 0]
                zy[r0 + idx] = z[idx, lab[idx] - v0]
            del z, e
    lse = m + torch.log(s)
    entropy = lse - t / s
    mean_z = h @ (wsum / V)
    if bias is not None:
        mean_z = mean_z + bias.float().mean() * inv_t
    self_certainty = lse - mean_z - math.log(V)
    logprob = torch.where(ids >= 0, zy - lse, torch.zeros_like(lse))
    return logprob, entropy, self_certainty, lse


def _rows_without_keys(key_groups, Tq, Tk, causal):
    """[B, Tq] bool: query rows that see no key (all visible keys are padding)."""
    valid = (key_groups >= 0).to(torch.int32)
    if not causal:
        return (valid.sum(1) == 0)[:, None].expand(-1, Tq)
    seen = valid.cumsum(1)[:, Tk - Tq:]  # keys visible to row i: 0 .. i + Tk - Tq
    return seen == 0


def padded_head_dim(d: int, num_groups: int) -> int:
    """Head dim of the indicator-channel SDPA call: d + G rounded up to a multiple of 16 (SDPA's CPU kernels
    run 144 as fast as 132 in fp32 and 1.7x faster than 136 in bf16)."""
    return -(-(d + num_groups) // 16) * 16


def _sdpa_rows(qa, ka, va, valid, causal, scale, gqa, q_chunk):
    """SDPA over the padded heads; boolean masks per query chunk only when padding or a bottom-right causal
    offset needs them (``[B, 1, chunk, Tk]``, never ``[Tq, Tk]``)."""
    Tq, Tk = qa.shape[2], ka.shape[2]
    off = Tk - Tq
    if valid is None and (not causal or off == 0 or Tq == 1):
        return F.scaled_dot_product_attention(qa, ka, va, scale=scale, is_causal=causal and Tq > 1,
                                              enable_gqa=gqa)
    out = qa.new_empty(*qa.shape[:3], va.shape[-1])
    j = torch.arange(Tk, device=qa.device)
    for i0 in range(0, Tq, q_chunk):
        i1 = min(Tq, i0 + q_chunk)
        kend = min(Tk, i1 + off) if causal else Tk
        if valid is None:
            mask = torch.ones(1, 1, 1, kend, dtype=torch.bool, device=qa.device)
        else:
            mask = valid[:, None, None, :kend]
        if causal:
            i = torch.arange(i0, i1, device=qa.device)[:, None]
            mask = mask & (j[None, :kend] <= i + off)[None, None]
        out[:, :, i0:i1] = F.scaled_dot_product_attention(
            qa[:, :, i0:i1], ka[:, :, :kend], va[:, :, :kend], attn_mask=mask, scale=scale, enable_gqa=gqa
        )
    return out


def _kv_heads_per_chunk(B, Hkv, rep, elems_per_kv_head, chunk_elems, device):
    """Key/value heads per chunk of the forward-only path: the largest divisor of Hkv within ``chunk_elems``
    whose B x query heads are a multiple of the thread count. SDPA's CPU kernel splits (batch, head, query
    block) items statically over threads, so an uneven chunk leaves threads idle on the long causal rows
    (one head on two threads: 1.4x slower). Off-CPU, or when no divisor fits the threads, all heads at
    once."""
    if device.type != "cpu":
        return Hkv
    threads = torch.get_num_threads()
    even = [c for c in range(1, Hkv + 1) if Hkv % c == 0 and (B * c * rep) % threads == 0]
    if not even:
        return Hkv
    fitting = [c for c in even if c * elems_per_kv_head <= chunk_elems]
    return max(fitting) if fitting else min(even)


def attention_with_mass_torch(q, k, v, key_groups, num_groups, causal=True, scale=None, q_chunk=256,
                              chunk_elems=1 << 20):
    B, Hq, Tq, d = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    rep = Hq // Hkv
    G = int(num_groups)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    valid = key_groups >= 0
    ind = F.one_hot(key_groups.long().clamp_min(0), G).to(v.dtype) * valid[..., None].to(v.dtype)
    dp = padded_head_dim(d, G)
    gqa = rep != 1
    valid_or_none = None if bool(valid.all()) else valid
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # differentiable path: fresh padded tensors for all heads at once (buffers reused in place would
        # break autograd); the output is a strided view of the first d channels
        qa, ka = F.pad(q, (0, dp - d)), F.pad(k, (0, dp - d))
        va = torch.cat([v, ind[:, None].expand(B, Hkv, Tk, G), v.new_zeros(B, Hkv, Tk, dp - d - G)], dim=-1)
        o = _sdpa_rows(qa, ka, va, valid_or_none, causal, scale, gqa, q_chunk)
        out, mass = o[..., :d], o[..., d:d + G].float()
    else:
        # forward only: a few key/value heads at a time through padded buffers that are allocated once and
        # refilled, so the padded copies stay small (about chunk_elems floats each) and cache-resident
        kv_chunk = _kv_heads_per_chunk(B, Hkv, rep, max(Tq * rep, Tk) * dp, chunk_elems, q.device)
        qa = q.new_zeros(B, kv_chunk * rep, Tq, dp)
        ka = k.new_zeros(B, kv_chunk, Tk, dp)
        va = v.new_zeros(B, kv_chunk, Tk, dp)
        va[..., d:d + G] = ind[:, None]
        out = q.new_empty(B, Hq, Tq, d)
        mass = torch.empty(B, Hq, Tq, G, dtype=torch.float32, device=q.device)
        for h0 in range(0, Hkv, kv_chunk):  # kv_chunk divides Hkv: every chunk is full
            qh = slice(h0 * rep, (h0 + kv_chunk) * rep)
            qa[..., :d] = q[:, qh]
            ka[..., :d] = k[:, h0:h0 + kv_chunk]
            va[..., :d] = v[:, h0:h0 + kv_chunk]
            o = _sdpa_rows(qa, ka, va, valid_or_none, causal, scale, gqa, q_chunk)
            out[:, qh] = o[..., :d]
            mass[:, qh] = o[..., d:d + G]
    # without padding every row sees a key (causal row i sees keys 0 .. i + Tk - Tq, and Tq <= Tk)
    if valid_or_none is not None:
        empty = _rows_without_keys(key_groups, Tq, Tk, causal)
        if bool(empty.any()):
            out = out.masked_fill(empty[:, None, :, None], 0.0)
            mass = mass.masked_fill(empty[:, None, :, None], 0.0)
    return out, mass

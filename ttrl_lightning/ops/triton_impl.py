"""Triton backend ("triton") of the signal ops.

``token_stats``: grid (token blocks, vocabulary splits). A program owns BLOCK_M tokens and one split of
SPLIT_V vocabulary columns; it walks the split in BLOCK_V tiles, each tile one ``tl.dot`` chain over the
hidden size, and keeps (max m, s = sum e^{z-m}, t = sum z e^{z-m}, label logit) online. Splits are merged in
PyTorch (O(splits x M)). Peak extra memory: 4 x splits x M floats.

``attention_with_mass``: FlashAttention-2-style forward, grid (query blocks, B x Hq). The running max, the
denominator l, the output accumulator and the per-group sums (one ``tl.dot`` of the probabilities with a
one-hot group matrix, padded to 16 groups) are rescaled together; padding keys (group -1) and the
bottom-right causal mask are applied in-register. Never writes [Tq, Tk].

On CPU it runs under ``TRITON_INTERPRET=1`` (tests only); the interpreter gets fp32 arithmetic throughout.
On GPU, bf16/fp16 inputs use tensor-core dots with fp32 accumulation; the probability matrix enters the
group-mass dot as a hi + lo bf16 pair, so the mass keeps ~16 mantissa bits.
"""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from .vocab_splits import finish_token_stats

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _token_stats_kernel(
    h_ptr, w_ptr, b_ptr, ids_ptr, part_ptr,
    M, V, H, inv_t, split_v,
    stride_hm, stride_wv,
    HAS_BIAS: tl.constexpr, LOWP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    labels = tl.load(ids_ptr + rows, mask=row_ok, other=-1)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s_i = tl.zeros([BLOCK_M], tl.float32)
    t_i = tl.zeros([BLOCK_M], tl.float32)
    zy = tl.zeros([BLOCK_M], tl.float32)
    v_begin = pid_s * split_v
    v_end = tl.minimum(v_begin + split_v, V)
    for v0 in range(v_begin, v_end, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < v_end
        z = tl.zeros([BLOCK_M, BLOCK_V], tl.float32)
        for k0 in range(0, H, BLOCK_H):
            ks = k0 + tl.arange(0, BLOCK_H)
            k_ok = ks < H
            hb = tl.load(h_ptr + rows[:, None] * stride_hm + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            wb = tl.load(w_ptr + cols[:, None] * stride_wv + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0)
            if LOWP:
                z += tl.dot(hb, tl.trans(wb))
            else:
                z += tl.dot(hb.to(tl.float32), tl.trans(wb.to(tl.float32)), input_precision="ieee")
        if HAS_BIAS:
            z += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        z = z * inv_t
        z = tl.where(col_ok[None, :], z, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(z, axis=1))
        alpha = tl.exp(m_i - m_new)
        e = tl.exp(z - m_new[:, None])
        s_i = s_i * alpha + tl.sum(e, axis=1)
        t_i = t_i * alpha + tl.sum(tl.where(col_ok[None, :], e * z, 0.0), axis=1)
        zy += tl.sum(tl.where(cols[None, :] == labels[:, None], z, 0.0), axis=1)
        m_i = m_new
    base = part_ptr + pid_s * 4 * M
    tl.store(base + rows, m_i, mask=row_ok)
    tl.store(base + M + rows, s_i, mask=row_ok)
    tl.store(base + 2 * M + rows, t_i, mask=row_ok)
    tl.store(base + 3 * M + rows, zy, mask=row_ok)


def _on_device(t):
    """Launch on the tensor's GPU (a no-op on CPU under the interpreter)."""
    import contextlib

    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _launch_token_stats(grid, hidden, weight, b_arg, ids, part, M, V, H, temperature, split_v, has_bias, lowp,
                        block_m, block_v, block_h):
    _token_stats_kernel[grid](
        hidden, weight, b_arg, ids, part,
        M, V, H, 1.0 / float(temperature), split_v,
        hidden.stride(0), weight.stride(0),
        HAS_BIAS=has_bias, LOWP=lowp,
        BLOCK_M=block_m, BLOCK_V=block_v, BLOCK_H=block_h,
    )


def token_stats_triton(hidden, weight, token_ids, bias=None, temperature=1.0):
    M, H = hidden.shape
    V = weight.shape[0]
    hidden = hidden.contiguous()
    weight = weight.contiguous()
    ids = token_ids.to(torch.int64).contiguous()
    lowp = (not INTERPRET) and hidden.dtype in (torch.bfloat16, torch.float16) and weight.dtype == hidden.dtype
    if INTERPRET:
        block_m, block_v, block_h, split_v = 16, 64, 32, 512
    else:
        block_m, block_v, block_h, split_v = 64, 128, 64, 8192
    n_split = triton.cdiv(V, split_v)
    part = torch.empty(n_split, 4, M, device=hidden.device, dtype=torch.float32)
    grid = (triton.cdiv(M, block_m), n_split)
    b_arg = bias.contiguous() if bias is not None else hidden  # dummy pointer when HAS_BIAS is False
    with _on_device(hidden):
        _launch_token_stats(grid, hidden, weight, b_arg, ids, part, M, V, H, temperature, split_v, bias is not None,
                            lowp, block_m, block_v, block_h)
    return finish_token_stats(part, hidden, weight, ids, bias, temperature)


@triton.jit
def _attn_mass_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, o_ptr, mass_ptr,
    Hq, Tq, Tk, D, rep, off, scale,
    sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, so_b, so_h, so_t, sg_b,
    NUM_GROUPS: tl.constexpr, GP: tl.constexpr, CAUSAL: tl.constexpr, LOWP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // Hq
    hq = pid_bh % Hq
    hk = hq // rep
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_g = tl.arange(0, GP)
    m_ok = offs_m < Tq
    d_ok = offs_d < D
    q = tl.load(q_ptr + b * sq_b + hq * sq_h + offs_m[:, None] * sq_t + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    if not LOWP:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    gacc = tl.zeros([BLOCK_M, GP], tl.float32)
    if CAUSAL:
        hi = tl.minimum(Tk, (pid_m + 1) * BLOCK_M + off)
    else:
        hi = Tk
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sk_b + hk * sk_h
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < Tk
        kb = tl.load(k_base + offs_n[:, None] * sk_t + offs_d[None, :], mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        vb = tl.load(v_base + offs_n[:, None] * sk_t + offs_d[None, :], mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        grp = tl.load(g_ptr + b * sg_b + offs_n, mask=n_ok, other=-1)
        if LOWP:
            s = tl.dot(q, tl.trans(kb))
        else:
            s = tl.dot(q, tl.trans(kb.to(tl.float32)), input_precision="ieee")
        s = s * scale
        visible = (grp >= 0)[None, :] & m_ok[:, None]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + off)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        onehot = (grp[:, None] == offs_g[None, :]).to(tl.float32)
        if LOWP:
            p_hi = p.to(vb.dtype)
            p_lo = (p - p_hi.to(tl.float32)).to(vb.dtype)
            acc = acc * alpha[:, None] + tl.dot(p_hi, vb)
            oh = onehot.to(vb.dtype)
            gacc = gacc * alpha[:, None] + tl.dot(p_hi, oh) + tl.dot(p_lo, oh)
        else:
            acc = acc * alpha[:, None] + tl.dot(p, vb.to(tl.float32), input_precision="ieee")
            gacc = gacc * alpha[:, None] + tl.dot(p, onehot, input_precision="ieee")
        m_i = m_new
    inv = tl.where(l_i > 0, 1.0 / l_i, 0.0)
    out = acc * inv[:, None]
    tl.store(o_ptr + b * so_b + hq * so_h + offs_m[:, None] * so_t + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])
    mass = gacc * inv[:, None]
    mrow = mass_ptr + (pid_bh * Tq + offs_m) * NUM_GROUPS
    tl.store(mrow[:, None] + offs_g[None, :], mass, mask=m_ok[:, None] & (offs_g < NUM_GROUPS)[None, :])


def attention_with_mass_triton(q, k, v, key_groups, num_groups, causal=True, scale=None):
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q = q.contiguous()
    k = k.contiguous()
    v = v.contiguous()
    groups = key_groups.to(torch.int32).contiguous()
    lowp = (not INTERPRET) and q.dtype in (torch.bfloat16, torch.float16)
    out = torch.empty_like(q)
    mass = torch.empty(B, Hq, Tq, num_groups, device=q.device, dtype=torch.float32)
    gp = max(16, triton.next_power_of_2(num_groups))
    block_d = max(16, triton.next_power_of_2(D))
    if INTERPRET:
        block_m, block_n = 16, 16
    else:
        block_m, block_n = (128, 64) if block_d <= 64 else (64, 64)
    grid = (triton.cdiv(Tq, block_m), B * Hq)
    with _on_device(q):
        _attn_mass_kernel[grid](
            q, k, v, groups, out, mass,
            Hq, Tq, Tk, D, Hq // Hkv, Tk - Tq, scale,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            out.stride(0), out.stride(1), out.stride(2), groups.stride(0),
            NUM_GROUPS=num_groups, GP=gp, CAUSAL=bool(causal), LOWP=lowp,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        )
    return out, mass

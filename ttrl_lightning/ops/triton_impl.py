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

Block sizes fit the device: a launch whose block needs more shared memory than the device's opt-in limit
per block fails ("out of resources"), and the limit differs by architecture (sm_80 166,912 B, sm_89
101,376 B, sm_90 232,448 B). :func:`attention_blocks` and :func:`token_stats_blocks` take the first tile
shape (and ``num_stages``) of a preference list whose shared-memory bound (:func:`attention_shared_bytes`,
:func:`token_stats_shared_bytes`, upper bounds of what Triton's compiler allocates, fitted to compiled
kernels) fits the limit read from ``torch.cuda.get_device_properties(...).shared_memory_per_block_optin``.
``ttrl_lightning.ops.triton_compile`` compiles every choice for sm_80/89/90 without a GPU and checks it.
"""
from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

from .vocab_splits import finish_token_stats

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

#: dtype names accepted by the block choosers -> element size in bytes
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
#: the smallest opt-in shared memory per block of the supported architectures (sm_89: L4, RTX 4090), used
#: when the device does not report its own
SMALLEST_SHARED_LIMIT = 101_376
NUM_WARPS = 4


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"fp32"`` (``"bf16"``, ``"fp16"``)."""
    return _DTYPE_NAMES[dtype]


@functools.lru_cache(maxsize=None)
def _shared_limit_of(index: int) -> int:
    props = torch.cuda.get_device_properties(index)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or SMALLEST_SHARED_LIMIT)


def device_shared_limit(device: torch.device) -> int:
    """Opt-in shared memory per block (bytes) of a CUDA device, read once per device; on CPU (the interpreter)
    the smallest limit of the supported architectures."""
    device = torch.device(device)
    if device.type != "cuda":
        return SMALLEST_SHARED_LIMIT
    return _shared_limit_of(device.index if device.index is not None else torch.cuda.current_device())


def _check_dtype(dtype: str) -> int:
    if dtype not in ELEMENT_BYTES:
        raise ValueError(f"dtype must be one of {sorted(ELEMENT_BYTES)}, got {dtype!r}")
    return ELEMENT_BYTES[dtype]


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


#: token_stats tiles (BLOCK_M, BLOCK_V, BLOCK_H, num_stages), most preferred first
TOKEN_STATS_TILES = ((64, 128, 64, 3), (64, 128, 64, 2), (64, 64, 64, 2), (32, 64, 32, 2), (16, 32, 16, 1))


def token_stats_shared_bytes(dtype: str, block_m: int, block_v: int, block_h: int, num_stages: int) -> int:
    """Upper bound of the shared memory (bytes) of one ``_token_stats_kernel`` block: the hidden and weight
    tiles of the ``tl.dot`` chain, pipelined over ``num_stages - 1`` buffers (at least one),
    ``e (BLOCK_M + BLOCK_V) BLOCK_H max(1, num_stages - 1)`` (bf16/fp16 on sm_80/89 keep one buffer), plus
    ``4 (BLOCK_M + BLOCK_V)`` bytes of row vectors; fitted to Triton 3.6-3.9 compiles for sm_80/89/90
    (``ttrl_lightning.ops.triton_compile`` checks it): fp32 64 x 128 x 64 with 3 stages needs 98,304 B."""
    e = _check_dtype(dtype)
    tiles = e * (block_m + block_v) * block_h * max(1, num_stages - 1)
    return tiles + 4 * (block_m + block_v)


def token_stats_blocks(dtype: str, shared_limit: int, has_bias: bool = False) -> dict:
    """Launch arguments of ``_token_stats_kernel`` for ``dtype`` ("fp32" | "bf16" | "fp16": the inputs' common
    dtype; mixed inputs run as "fp32") on a device with ``shared_limit`` bytes of shared memory per block:
    the constexprs (``HAS_BIAS``, ``LOWP``, ``BLOCK_M``, ``BLOCK_V``, ``BLOCK_H``) plus ``num_warps`` and
    ``num_stages``. The first tile of :data:`TOKEN_STATS_TILES` whose bound fits is taken."""
    for bm, bv, bh, stages in TOKEN_STATS_TILES:
        if token_stats_shared_bytes(dtype, bm, bv, bh, stages) <= shared_limit:
            return dict(HAS_BIAS=bool(has_bias), LOWP=dtype != "fp32", BLOCK_M=bm, BLOCK_V=bv, BLOCK_H=bh,
                        num_warps=NUM_WARPS, num_stages=stages)
    smallest = token_stats_shared_bytes(dtype, *TOKEN_STATS_TILES[-1])
    raise ValueError(f"token_stats ({dtype}): no tile fits {shared_limit} bytes of shared memory per block "
                     f"(the smallest needs {smallest})")


def _on_device(t):
    """Launch on the tensor's GPU (a no-op on CPU under the interpreter)."""
    import contextlib

    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _launch_token_stats(grid, hidden, weight, b_arg, ids, part, M, V, H, temperature, split_v, blocks):
    _token_stats_kernel[grid](
        hidden, weight, b_arg, ids, part,
        M, V, H, 1.0 / float(temperature), split_v,
        hidden.stride(0), weight.stride(0),
        **blocks,
    )


def token_stats_triton(hidden, weight, token_ids, bias=None, temperature=1.0):
    M, H = hidden.shape
    V = weight.shape[0]
    hidden = hidden.contiguous()
    weight = weight.contiguous()
    ids = token_ids.to(torch.int64).contiguous()
    lowp = (not INTERPRET) and hidden.dtype in (torch.bfloat16, torch.float16) and weight.dtype == hidden.dtype
    if INTERPRET:
        blocks = dict(HAS_BIAS=bias is not None, LOWP=False, BLOCK_M=16, BLOCK_V=64, BLOCK_H=32)
        split_v = 512
    else:
        blocks = token_stats_blocks(dtype_name(hidden.dtype) if lowp else "fp32", device_shared_limit(hidden.device),
                                    has_bias=bias is not None)
        split_v = 8192
    n_split = triton.cdiv(V, split_v)
    part = torch.empty(n_split, 4, M, device=hidden.device, dtype=torch.float32)
    grid = (triton.cdiv(M, blocks["BLOCK_M"]), n_split)
    b_arg = bias.contiguous() if bias is not None else hidden  # dummy pointer when HAS_BIAS is False
    with _on_device(hidden):
        _launch_token_stats(grid, hidden, weight, b_arg, ids, part, M, V, H, temperature, split_v, blocks)
    return finish_token_stats(part, hidden, weight, ids, bias, temperature)


@triton.jit
def _attn_mass_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, o_ptr, mass_ptr,
    Hq, Tq, Tk, D, rep, off, num_groups, scale,
    sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, so_b, so_h, so_t, sg_b,
    GP: tl.constexpr, CAUSAL: tl.constexpr, LOWP: tl.constexpr,
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
    mrow = mass_ptr + (pid_bh * Tq + offs_m) * num_groups
    tl.store(mrow[:, None] + offs_g[None, :], mass, mask=m_ok[:, None] & (offs_g < num_groups)[None, :])


#: attention tiles (BLOCK_M, BLOCK_N, num_stages), most preferred first; 128-row query blocks only for head
#: dims <= 64 (FlashAttention-2's choice), otherwise the list starts at (64, 64, 3)
ATTENTION_TILES = ((128, 64, 3), (64, 64, 3), (64, 64, 2), (64, 32, 2), (32, 32, 2), (32, 16, 2), (16, 16, 1))


def attention_shared_bytes(dtype: str, block_m: int, block_n: int, block_d: int, gp: int, num_stages: int) -> int:
    """Upper bound of the shared memory (bytes) of one ``_attn_mass_kernel`` block, fitted to Triton 3.6-3.9
    compiles for sm_80/89/90 (``ttrl_lightning.ops.triton_compile`` checks it on every launcher choice).

    * fp32 (``input_precision="ieee"``: FMA dots whose operands are staged through shared memory): the K and V
      tiles pipelined over ``num_stages - 1`` buffers, ``2 x 4 BLOCK_N BLOCK_D (num_stages - 1)``, plus q, the
      probabilities and the one-hot group matrix in dot-operand layout, ``4 (BLOCK_M BLOCK_D + BLOCK_M
      BLOCK_N + BLOCK_N GP)``;
    * bf16/fp16 (tensor-core dots, operands in registers; Hopper's wgmma reads K and V from shared memory):
      ``e BLOCK_D (BLOCK_M + 2 BLOCK_N)``;
    * plus ``4 (BLOCK_M + BLOCK_N) num_stages`` bytes of row vectors and masks.
    """
    e = _check_dtype(dtype)
    if dtype == "fp32":
        tiles = 2 * 4 * block_n * block_d * max(1, num_stages - 1) + 4 * (
            block_m * block_d + block_m * block_n + block_n * gp)
    else:
        tiles = e * block_d * (block_m + 2 * block_n)
    return tiles + 4 * (block_m + block_n) * max(1, num_stages)


def attention_blocks(dtype: str, head_dim: int, shared_limit: int, num_groups: int = 4, causal: bool = True) -> dict:
    """Launch arguments of ``_attn_mass_kernel`` for ``dtype`` ("fp32" | "bf16" | "fp16"), ``head_dim`` and a
    device with ``shared_limit`` bytes of opt-in shared memory per block: the constexprs (``GP``, ``CAUSAL``,
    ``LOWP``, ``BLOCK_M``, ``BLOCK_N``, ``BLOCK_D``) plus ``num_warps`` and ``num_stages``. The first tile of
    :data:`ATTENTION_TILES` whose :func:`attention_shared_bytes` fits ``shared_limit`` is taken, e.g. fp32 at
    head dim 128 gets 64 x 64 x 3 stages on sm_90, 64 x 64 x 2 on sm_80 and 64 x 32 x 2 on sm_89."""
    _check_dtype(dtype)
    if int(head_dim) < 1 or int(num_groups) < 1:
        raise ValueError(f"head_dim and num_groups must be >= 1, got {head_dim} and {num_groups}")
    block_d = max(16, triton.next_power_of_2(int(head_dim)))
    gp = max(16, triton.next_power_of_2(int(num_groups)))
    tiles = ATTENTION_TILES if block_d <= 64 else ATTENTION_TILES[1:]
    for bm, bn, stages in tiles:
        if attention_shared_bytes(dtype, bm, bn, block_d, gp, stages) <= shared_limit:
            return dict(GP=gp, CAUSAL=bool(causal), LOWP=dtype != "fp32", BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d,
                        num_warps=NUM_WARPS, num_stages=stages)
    smallest = attention_shared_bytes(dtype, *tiles[-1][:2], block_d, gp, tiles[-1][2])
    raise ValueError(f"attention_with_mass ({dtype}, head dim {head_dim}): no tile fits {shared_limit} bytes of "
                     f"shared memory per block (the smallest needs {smallest})")


def attention_with_mass_triton(q, k, v, key_groups, num_groups, causal=True, scale=None):
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q = q.contiguous()
    k = k.contiguous()
    v = v.contiguous()
    groups = key_groups.to(torch.int32).contiguous()
    out = torch.empty_like(q)
    mass = torch.empty(B, Hq, Tq, num_groups, device=q.device, dtype=torch.float32)
    if INTERPRET:
        blocks = dict(GP=max(16, triton.next_power_of_2(num_groups)), CAUSAL=bool(causal), LOWP=False,
                      BLOCK_M=16, BLOCK_N=16, BLOCK_D=max(16, triton.next_power_of_2(D)))
    else:
        blocks = attention_blocks(dtype_name(q.dtype), D, device_shared_limit(q.device), num_groups, causal)
    grid = (triton.cdiv(Tq, blocks["BLOCK_M"]), B * Hq)
    with _on_device(q):
        _attn_mass_kernel[grid](
            q, k, v, groups, out, mass,
            Hq, Tq, Tk, D, Hq // Hkv, Tk - Tq, num_groups, scale,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            out.stride(0), out.stride(1), out.stride(2), groups.stride(0),
            **blocks,
        )
    return out, mass

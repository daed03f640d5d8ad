"""Triton tile epilogues of ``linear_logprobs`` (the "triton" backend; the driver and its GEMMs are in
``linear_logprobs.py``, cuBLAS on GPU).

One program per row of a float32 logits tile ``z [R, C]``, walking the row in ``BLOCK_C`` columns:

* ``_forward_tile_kernel``: pass 1 takes the row max; pass 2 sums ``e = exp(z - m_new)`` and ``e z`` and
  optionally writes ``e`` over ``z`` and ``e z`` into ``ez``; then ``s, t`` are rescaled by
  ``alpha = exp(m_old - m_new)`` and the label logit is kept (read before the row is overwritten).
* ``_backward_tile_kernel``: ``grad_z = g delta_vy - p (g + g_H (z - mu))``, ``p = exp(z - lse)``, in place;
  the label term is folded into the same pass.

No ``tl.dot``: the only on-chip storage is the ``BLOCK_C``-wide reductions, so shared memory stays a few KB on
every architecture (``tile_blocks`` checks the choice against the device's per-block limit). On CPU the
kernels run under ``TRITON_INTERPRET=1`` (tests only), with small blocks.
"""
from __future__ import annotations

import contextlib
import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# sm_89 (L4, RTX 4090) has the smallest opt-in shared memory per block of the supported GPUs (sm_80/89/90).
SM89_SHARED_BYTES = 101_376


def tile_blocks(n_cols: int, shared_limit: int = SM89_SHARED_BYTES, interpret: bool = INTERPRET) -> dict:
    """Launch constants for a tile of ``n_cols`` columns: ``BLOCK_C`` (a power of two, at most 2048 columns
    on GPU, 64 in the interpreter) and ``num_warps``. The reductions need at most ``2 x BLOCK_C`` floats of
    shared memory, which must fit ``shared_limit`` bytes."""
    cap = 64 if interpret else 2048
    block = min(cap, triton.next_power_of_2(max(1, n_cols)))
    while block > 16 and 2 * block * 4 > shared_limit:
        block //= 2
    return {"BLOCK_C": block, "num_warps": 1 if interpret else max(1, min(8, block // 256))}


@triton.jit
def _forward_tile_kernel(
    z_ptr, ez_ptr, m_ptr, s_ptr, t_ptr, zy_ptr, ids_ptr, alpha_ptr,
    C, v0, stride_z,
    WRITE_E: tl.constexpr, WRITE_EZ: tl.constexpr, BLOCK_C: tl.constexpr,
):
    r = tl.program_id(0)
    row = z_ptr + r.to(tl.int64) * stride_z
    y = tl.load(ids_ptr + r) - v0
    has_label = (y >= 0) & (y < C)
    z_label = tl.load(row + tl.where(has_label, y, 0), mask=has_label, other=0.0)
    mx = tl.full([BLOCK_C], float("-inf"), tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mx = tl.maximum(mx, tl.load(row + cols, mask=cols < C, other=float("-inf")))
    m_old = tl.load(m_ptr + r)
    m_new = tl.maximum(m_old, tl.max(mx, axis=0))
    se = tl.zeros([BLOCK_C], tl.float32)
    te = tl.zeros([BLOCK_C], tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        ok = cols < C
        z = tl.load(row + cols, mask=ok, other=0.0)
        e = tl.where(ok, tl.exp(z - m_new), 0.0)
        se += e
        te += e * z
        if WRITE_EZ:
            tl.store(ez_ptr + r.to(tl.int64) * stride_z + cols, e * z, mask=ok)
        if WRITE_E:
            tl.store(row + cols, e, mask=ok)
    alpha = tl.where(m_old == float("-inf"), 0.0, tl.exp(m_old - m_new))
    tl.store(s_ptr + r, tl.load(s_ptr + r) * alpha + tl.sum(se, axis=0))
    tl.store(t_ptr + r, tl.load(t_ptr + r) * alpha + tl.sum(te, axis=0))
    tl.store(m_ptr + r, m_new)
    tl.store(alpha_ptr + r, alpha)
    tl.store(zy_ptr + r, z_label, mask=has_label)


@triton.jit
def _backward_tile_kernel(
    z_ptr, lse_ptr, mu_ptr, g_ptr, gh_ptr, ids_ptr,
    C, v0, stride_z,
    WITH_ENTROPY: tl.constexpr, BLOCK_C: tl.constexpr,
):
    r = tl.program_id(0)
    row = z_ptr + r.to(tl.int64) * stride_z
    y = tl.load(ids_ptr + r) - v0
    lse = tl.load(lse_ptr + r)
    g = tl.load(g_ptr + r)
    if WITH_ENTROPY:
        g_h = tl.load(gh_ptr + r)
        mu = tl.load(mu_ptr + r)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        ok = cols < C
        z = tl.load(row + cols, mask=ok, other=0.0)
        p = tl.exp(z - lse)
        if WITH_ENTROPY:
            gz = -p * (g + g_h * (z - mu))
        else:
            gz = -p * g
        gz = tl.where(cols == y, gz + g, gz)
        tl.store(row + cols, gz, mask=ok)


def _on_device(t: torch.Tensor):
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def forward_tile_triton(z, m, s, t, zy, ids, v0, write_e, ez):
    """Same contract as ``linear_logprobs.forward_tile_torch``."""
    R, C = z.shape
    alpha = torch.empty_like(m)
    blocks = tile_blocks(C)
    with _on_device(z):
        _forward_tile_kernel[(R,)](
            z, ez if ez is not None else z, m, s, t, zy, ids, alpha,
            C, v0, z.stride(0),
            WRITE_E=bool(write_e), WRITE_EZ=ez is not None, **blocks,
        )
    return alpha


def backward_tile_triton(z, lse, mu, g_logprob, g_entropy, ids, v0):
    """Same contract as ``linear_logprobs.backward_tile_torch``."""
    R, C = z.shape
    blocks = tile_blocks(C)
    with _on_device(z):
        _backward_tile_kernel[(R,)](
            z, lse, mu, g_logprob, g_entropy if g_entropy is not None else g_logprob, ids,
            C, v0, z.stride(0),
            WITH_ENTROPY=g_entropy is not None, **blocks,
        )

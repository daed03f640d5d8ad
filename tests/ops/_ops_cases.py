"""Shared input builders for the signal-op tests (odd shapes on purpose: V=1271, T=41, d=24) and the skip of
backends that were not built."""
from __future__ import annotations

import pytest
import torch

from ttrl_lightning.ops.backends import unavailable_reason

CPU_BACKENDS = ["torch", "cpp"]


def require_backend(backend, op=None):
    """Skip (with the reason) when ``backend`` (for ``op``, if given) cannot run here; ``make test`` turns a
    missing ``cpp`` into a failure through TTRL_REQUIRE_BACKENDS (tests/ops/test_extension_required.py)."""
    reason = unavailable_reason(backend, op)
    if reason is not None:
        pytest.skip(f"backend {backend}{f' for {op}' if op else ''} unavailable here: {reason}")


def token_stats_inputs(dtype=torch.float32, M=41, H=40, V=1271, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(M, H, generator=gen).to(dtype)
    weight = (torch.randn(V, H, generator=gen) * 0.3).to(dtype)
    b = torch.randn(V, generator=gen).to(dtype) if bias else None
    ids = torch.randint(0, V, (M,), generator=gen)
    ids[::7] = -100  # positions without a label (prompt / padding)
    return hidden, weight, ids, b


def attention_inputs(dtype=torch.float32, B=2, Hq=4, Hkv=2, Tq=13, Tk=29, d=24, G=4, pad=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Tq, d, generator=gen).to(dtype)
    k = torch.randn(B, Hkv, Tk, d, generator=gen).to(dtype)
    v = torch.randn(B, Hkv, Tk, d, generator=gen).to(dtype)
    groups = torch.randint(0, G, (B, Tk), generator=gen)
    if pad:
        groups[0, : Tk - Tq + 3] = -1  # left padding that leaves the first 3 query rows without keys
        groups[-1, 5] = -1  # a hole in the middle
    return q, k, v, groups, G

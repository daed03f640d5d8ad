"""Larger shapes against the reference (slow: run with `make test-all` or `pytest -m slow`)."""
from __future__ import annotations

import pytest
import torch

from tests.ops._ops_cases import attention_inputs, token_stats_inputs
from ttrl_lightning.ops import attention_with_mass, available_backends, token_stats
from ttrl_lightning.ops.reference import attention_with_mass_reference, token_stats_reference

pytestmark = pytest.mark.slow
CPU_BACKENDS = [b for b in ("torch", "cpp") if b in available_backends()]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_stats_qwen_like_vocab(backend, dtype):
    hidden, weight, ids, b = token_stats_inputs(dtype, M=300, H=64, V=151936 // 4 + 3, seed=5)
    ref = token_stats_reference(hidden, weight, ids, b, 0.8)
    got = token_stats(hidden, weight, ids, b, 0.8, backend=backend)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, atol=5e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_long_context_several_blocks(backend, causal):
    # more keys than one C++ key block (512) and query chunk (256); GQA 8:2; padding on the left of row 0
    q, k, v, groups, G = attention_inputs(torch.float32, B=2, Hq=8, Hkv=2, Tq=600, Tk=1100, d=64, G=4, seed=7)
    ref_out, ref_mass = attention_with_mass_reference(q, k, v, groups, G, causal)
    out, mass = attention_with_mass(q, k, v, groups, G, causal, backend=backend)
    torch.testing.assert_close(out, ref_out, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(mass, ref_mass, atol=2e-5, rtol=1e-4)

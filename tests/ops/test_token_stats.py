"""token_stats on every CPU backend against the full-logits reference (ops/reference.py)."""
from __future__ import annotations

import math

import pytest
import torch

from tests.ops._ops_cases import CPU_BACKENDS, require_backend, token_stats_inputs
from tests.ops._peak_memory import peak_extra_bytes
from ttrl_lightning.ops import available_backends, token_stats
from ttrl_lightning.ops.reference import token_stats_reference


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias,temperature", [(True, 0.7), (False, 1.0)])
def test_matches_reference(backend, dtype, bias, temperature):
    require_backend(backend)
    hidden, weight, ids, b = token_stats_inputs(dtype, bias=bias)
    ref = token_stats_reference(hidden, weight, ids, b, temperature)  # fp32 maths on the same rounded inputs
    got = token_stats(hidden, weight, ids, b, temperature, backend=backend)
    for name, r, g in zip(("logprob", "entropy", "self_certainty", "lse"), ref, got):
        assert g.dtype == torch.float32 and g.shape == (hidden.shape[0],), name
        torch.testing.assert_close(g, r, atol=2e-4, rtol=1e-4, msg=f"{backend} {dtype} {name}")
    assert torch.all(got[0][ids < 0] == 0)


def test_reference_formulas_by_hand():
    """Independent check of the reference on a 3-word vocabulary worked by hand."""
    z = torch.tensor([[1.0, 2.0, 3.0]])
    eye = torch.eye(3)
    lp, ent, sc, lse = token_stats_reference(z, eye, torch.tensor([1]))
    p = [math.exp(x) for x in (1.0, 2.0, 3.0)]
    zsum = sum(p)
    p = [x / zsum for x in p]
    assert lse.item() == pytest.approx(math.log(zsum), rel=1e-6)
    assert lp.item() == pytest.approx(math.log(p[1]), rel=1e-6)
    assert ent.item() == pytest.approx(-sum(x * math.log(x) for x in p), rel=1e-6)
    assert sc.item() == pytest.approx(-sum(math.log(x) for x in p) / 3 - math.log(3), rel=1e-6)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_many_vocab_blocks_and_extreme_logits(backend):
    """Several vocabulary blocks with the max moving between them; large logits must not overflow."""
    require_backend(backend)
    hidden, weight, ids, _ = token_stats_inputs(M=9, H=8, V=9000, bias=False, seed=3)
    weight[8500:] *= 30.0  # the max moves to the last block
    ref = token_stats_reference(hidden, weight, ids)
    got = token_stats(hidden, weight, ids, backend=backend)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, atol=2e-3, rtol=1e-4)


def test_bad_inputs_raise():
    hidden, weight, ids, b = token_stats_inputs()
    with pytest.raises(ValueError, match="hidden sizes differ"):
        token_stats(hidden[:, :-1], weight, ids)
    with pytest.raises(ValueError, match="vocabulary size"):
        token_stats(hidden, weight, torch.full_like(ids, weight.shape[0]))
    with pytest.raises(ValueError, match="temperature"):
        token_stats(hidden, weight, ids, temperature=0.0)
    with pytest.raises(TypeError, match="integer"):
        token_stats(hidden, weight, ids.float())
    for value in (float("nan"), float("inf")):
        bad = hidden.clone()
        bad[4, 2] = value
        for backend in available_backends():
            if backend in CPU_BACKENDS:
                with pytest.raises(ValueError, match="non-finite log-sum-exp at token 4"):
                    token_stats(bad, weight, ids, backend=backend)


def test_empty_batch():
    hidden, weight, ids, _ = token_stats_inputs()
    out = token_stats(hidden[:0], weight, ids[:0])
    assert all(t.shape == (0,) for t in out)


@pytest.mark.subprocess
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_never_materialises_full_logits(backend):
    """[M, V] float32 logits would add 256 MiB here (M = 1024, V = 65536); the fused op must stay well below a
    quarter of that. Each call is measured in a fresh process (tests/ops/_peak_memory.py)."""
    require_backend(backend)
    full = 1024 * 65536 * 4
    extra = peak_extra_bytes("token_stats", backend)
    assert extra < full / 4, f"peak extra {extra / 2**20:.1f} MiB vs full logits {full / 2**20:.0f} MiB"
    # the check can fail: materialising the logits is caught
    extra_full = peak_extra_bytes("token_stats", "reference")
    assert extra_full > full * 0.9, f"materialised reference: peak extra {extra_full / 2**20:.1f} MiB"


def test_token_stats_head_module_matches_reference():
    from ttrl_lightning.ops import TokenStatsHead

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 301, bias=True)
    hidden = torch.randn(2, 5, 16)
    ids = torch.randint(0, 301, (2, 5))
    with torch.no_grad():
        got = TokenStatsHead(head, temperature=0.5)(hidden, ids)
        ref = token_stats_reference(hidden.reshape(-1, 16), head.weight, ids.reshape(-1), head.bias, 0.5)
    for name, r in zip(("logprob", "entropy", "self_certainty", "lse"), ref):
        assert got[name].shape == (2, 5)
        torch.testing.assert_close(got[name].reshape(-1), r, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="disagree"):
        TokenStatsHead(head)(hidden, ids[:, :-1])

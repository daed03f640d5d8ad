"""attention_with_mass on every CPU backend against the materialised-probabilities reference."""
from __future__ import annotations

import pytest
import torch

from tests.ops._ops_cases import CPU_BACKENDS, attention_inputs, require_backend
from ttrl_lightning.ops import attention_with_mass, available_backends
from ttrl_lightning.ops.reference import attention_probs_reference, attention_with_mass_reference

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}
MASS_TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.bfloat16: dict(atol=8e-3, rtol=0)}


SHAPES = {
    "gqa_pad_rect": dict(Hq=4, Hkv=2, Tq=13, Tk=29, pad=True),
    "mha_square": dict(Hq=3, Hkv=3, Tq=17, Tk=17, pad=False),
    "square_pad": dict(Hq=4, Hkv=1, Tq=21, Tk=21, pad=True),
    "decode": dict(Hq=4, Hkv=2, Tq=1, Tk=19, pad=True),
    "rect_nopad": dict(Hq=2, Hkv=2, Tq=5, Tk=40, pad=False),
}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_matches_reference(backend, dtype, causal, shape):
    require_backend(backend)
    q, k, v, groups, G = attention_inputs(dtype, **SHAPES[shape])
    ref_out, ref_mass = attention_with_mass_reference(q, k, v, groups, G, causal)
    out, mass = attention_with_mass(q, k, v, groups, G, causal, backend=backend)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert mass.dtype == torch.float32 and mass.shape == (*q.shape[:3], G)
    torch.testing.assert_close(out.float(), ref_out.float(), **TOL[dtype])
    torch.testing.assert_close(mass, ref_mass, **MASS_TOL[dtype])
    # rows that see at least one key carry total mass 1; rows that see none carry 0
    sees = attention_probs_reference(q, k, groups, causal).sum(-1) > 0.5
    torch.testing.assert_close(mass.sum(-1), sees.float(), **MASS_TOL[dtype])


def test_reference_against_sdpa_and_hand_mask():
    """The reference itself agrees with torch SDPA given an explicit bottom-right mask."""
    q, k, v, groups, G = attention_inputs(torch.float32, Hq=2, Hkv=2, Tq=6, Tk=9, pad=True)
    groups[0, :] = torch.arange(9) % G  # batch 0 without padding so no row is empty
    i = torch.arange(6)[:, None]
    j = torch.arange(9)[None, :]
    mask = (j <= i + 3)[None, None] & (groups >= 0)[:, None, None, :]
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got, mass = attention_with_mass_reference(q, k, v, groups, G, causal=True)
    torch.testing.assert_close(got[0], want[0])
    # row 0 of batch 0 sees keys 0..3 with groups 0,1,2,3: masses by hand from the scores
    s = (q[0, 0, 0] @ k[0, 0, :4].T) / q.shape[-1] ** 0.5
    torch.testing.assert_close(mass[0, 0, 0], torch.softmax(s, -1))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_custom_scale_and_single_group(backend):
    require_backend(backend)
    q, k, v, groups, _ = attention_inputs(Hq=2, Hkv=1, Tq=7, Tk=11, pad=False)
    groups = torch.zeros_like(groups)
    ref_out, ref_mass = attention_with_mass_reference(q, k, v, groups, 1, True, scale=0.3)
    out, mass = attention_with_mass(q, k, v, groups, 1, True, scale=0.3, backend=backend)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mass, torch.ones_like(mass))


def test_bad_inputs_raise():
    q, k, v, groups, G = attention_inputs()
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attention_with_mass(q[:, :3], k, v, groups, G)
    with pytest.raises(ValueError, match="key_groups values"):
        attention_with_mass(q, k, v, groups.clamp_max(G - 1) + 1, G)
    with pytest.raises(ValueError, match=r"key_groups must be \[B="):
        attention_with_mass(q, k, v, groups[:, :-1], G)
    with pytest.raises(ValueError, match="more queries"):
        attention_with_mass(k.repeat(1, 2, 1, 1), q[:, :2], q[:, :2], groups[:, :13], G)
    bad_q = q.clone()
    bad_q[1, 0, 5, 0] = float("inf")
    bad_k = k.clone()
    bad_k[0, 1, 20, 3] = float("nan")
    for backend in CPU_BACKENDS:
        if backend in available_backends():
            with pytest.raises(ValueError, match="non-finite attention mass"):
                attention_with_mass(bad_q, k, v, groups, G, backend=backend)
            with pytest.raises(ValueError, match="non-finite attention mass"):
                attention_with_mass(q, bad_k, v, groups, G, backend=backend)


def test_output_is_differentiable_and_mass_detached():
    """With grad enabled the op falls back to the differentiable SDPA path; the gradient matches the reference."""
    q, k, v, groups, G = attention_inputs(Hq=2, Hkv=1, Tq=6, Tk=9, d=8, pad=True)
    q1, k1, v1 = (t.clone().requires_grad_() for t in (q, k, v))
    out, mass = attention_with_mass(q1, k1, v1, groups, G, causal=True, backend="cpp")
    assert not mass.requires_grad
    out.sum().backward()
    q2, k2, v2 = (t.clone().requires_grad_() for t in (q, k, v))
    ref_out, _ = attention_with_mass_reference(q2, k2, v2, groups, G, causal=True)
    ref_out.sum().backward()
    for a, b in ((q1, q2), (k1, k2), (v1, v2)):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kv_heads_per_chunk", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pad", [True, False])
def test_torch_backend_head_chunks(kv_heads_per_chunk, causal, pad, monkeypatch):
    """The forward-only torch path refills its padded buffers head chunk by head chunk (4 kv heads in chunks
    of 1 or 2, GQA with 2 query heads each); every chunk must match the reference. The thread count is pinned
    to 2 so that the chunk rule (a divisor of Hkv, B x query heads a multiple of the threads) is known."""
    from ttrl_lightning.ops import torch_impl

    monkeypatch.setattr(torch_impl.torch, "get_num_threads", lambda: 2)
    q, k, v, groups, G = attention_inputs(Hq=8, Hkv=4, Tq=11, Tk=23, d=20, pad=pad)
    per_head = max(11 * 2, 23) * torch_impl.padded_head_dim(20, G)
    chunk_elems = kv_heads_per_chunk * per_head
    assert torch_impl._kv_heads_per_chunk(2, 4, 2, per_head, chunk_elems, q.device) == kv_heads_per_chunk
    ref_out, ref_mass = attention_with_mass_reference(q, k, v, groups, G, causal)
    with torch.no_grad():
        out, mass = torch_impl.attention_with_mass_torch(q, k, v, groups, G, causal, chunk_elems=chunk_elems)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mass, ref_mass, atol=1e-5, rtol=1e-4)


def test_head_chunks_balance_threads(monkeypatch):
    """Chunks are divisors of Hkv whose B x query heads fill the threads evenly; else all heads at once."""
    from ttrl_lightning.ops import torch_impl

    monkeypatch.setattr(torch_impl.torch, "get_num_threads", lambda: 2)
    chunk, cpu = torch_impl._kv_heads_per_chunk, torch.device("cpu")
    assert chunk(1, 16, 1, 100, 350, cpu) == 2  # 3 would fit the budget but splits unevenly over 2 threads
    assert chunk(1, 16, 1, 100, 50, cpu) == 2  # nothing fits: the smallest even chunk
    assert chunk(1, 3, 1, 100, 10**9, cpu) == 3  # no even divisor: all heads
    assert chunk(2, 3, 1, 100, 150, cpu) == 1  # B = 2 makes one head per chunk even
    assert chunk(1, 16, 1, 100, 350, torch.device("meta")) == 16  # off-CPU: all heads

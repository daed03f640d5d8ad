"""linear_logprobs (ops/linear_logprobs.py): values and gradients against autograd through the plain reference
on every CPU backend (triton under the interpreter in a subprocess), the frozen-head plan, dispatch, bad
inputs, and that peak extra memory stays O(M x chunk)."""
from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys

import pytest
import torch

from tests.ops._linear_logprobs_cases import compare_with_reference, linear_logprobs_inputs
from tests.ops._ops_cases import CPU_BACKENDS, require_backend
from tests.ops._peak_memory import peak_extra_bytes
from ttrl_lightning.ops import backends
from ttrl_lightning.ops.linear_logprobs import linear_logprobs, selected_backend, unavailable_reason
from ttrl_lightning.ops.linear_logprobs_reference import linear_logprobs_reference

lp_module = importlib.import_module("ttrl_lightning.ops.linear_logprobs")  # the package exports the function

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def require(backend):
    require_backend(backend, lp_module.OP)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias,temperature,entropy",
                         [(True, 0.7, True), (False, 1.0, False), (True, 1.0, False)])
def test_values_and_gradients_match_reference(backend, dtype, bias, temperature, entropy):
    """Trainable head: logprob (and entropy) and the gradients of hidden, weight and bias, V = 1271 in
    chunks of 256 (the last one partial), H = 33."""
    require(backend)
    failures = compare_with_reference(backend, dtype, bias, temperature, entropy, train_head=True)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("entropy", [False, True])
def test_frozen_head_plan_matches_reference_without_a_vocabulary_pass(backend, entropy, monkeypatch):
    """weight and bias without gradient: the forward accumulators give grad_h, backward never walks V."""
    require(backend)

    def no_pass(*a, **k):
        raise AssertionError("the frozen-head plan must not recompute the logits in backward")

    monkeypatch.setattr(lp_module, "_backward_pass", no_pass)
    failures = compare_with_reference(backend, torch.float32, True, 0.8, entropy, train_head=False)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_odd_shapes_and_row_blocks(backend, monkeypatch):
    """M = 1; V = 7 in chunks of 3; H odd; then tiles of 4 rows (forced through TILE_ELEMS) over M = 41."""
    require(backend)
    for M, H, V, chunk in ((1, 5, 7, 3), (2, 1, 1, None)):
        failures = compare_with_reference(backend, torch.float32, True, 0.9, True, True, M=M, H=H, V=V,
                                          chunk_size=chunk)
        assert not failures, "\n".join(failures)
    monkeypatch.setitem(lp_module.TILE_ELEMS, "cpu", 4 * 256)
    assert lp_module.TilePlan.for_call(41, 1271, "cpu", 256).rows == 4
    for train_head in (True, False):
        failures = compare_with_reference(backend, torch.float32, True, 1.0, True, train_head)
        assert not failures, "\n".join(failures)


def test_leading_dims_bias_only_and_ignored_labels():
    """[B, T, H] hidden; a trainable bias with a frozen weight; ignored labels: logprob 0, no gradient."""
    hidden, weight, ids, b, g, _ = linear_logprobs_inputs(M=12, V=50)
    h = hidden.view(3, 4, -1).requires_grad_()
    bias = b.clone().requires_grad_()
    out = linear_logprobs(h, weight, ids.view(3, 4), 1.0, bias, backend="torch")
    assert out.shape == (3, 4) and out.dtype == torch.float32
    assert torch.all(out.view(-1)[ids < 0] == 0)
    gh, gb = torch.autograd.grad((out.view(-1) * g).sum(), [h, bias])
    h_ref, b_ref = hidden.clone().requires_grad_(), b.clone().requires_grad_()
    ref = linear_logprobs_reference(h_ref, weight, ids, 1.0, b_ref)
    rh, rb = torch.autograd.grad((ref * g).sum(), [h_ref, b_ref])
    torch.testing.assert_close(out.view(-1), ref, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(gh.view_as(rh), rh, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gb, rb, atol=1e-5, rtol=1e-5)
    assert torch.all(gh.view(12, -1)[ids < 0] == 0)  # a token without a label contributes nothing


def test_no_graph_runs_the_plain_forward_pass(monkeypatch):
    """Under no_grad the frozen-head accumulators (a second GEMM per tile) are not built."""
    hidden, weight, ids, b, _, _ = linear_logprobs_inputs(M=8, V=40)
    calls = []
    real = lp_module._forward_pass

    def spy(*args):
        calls.append(args[7])  # accumulate
        return real(*args)

    monkeypatch.setattr(lp_module, "_forward_pass", spy)
    h = hidden.clone().requires_grad_()
    with torch.no_grad():
        out = linear_logprobs(h, weight, ids, 1.0, b, backend="torch")
    assert calls == [False] and not out.requires_grad
    ref = linear_logprobs_reference(hidden, weight, ids, 1.0, b)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-5)
    linear_logprobs(h, weight, ids, 1.0, b, backend="torch")
    assert calls == [False, True]


def test_entropy_gradient_by_hand():
    """d entropy / d z_v = p_v (mu - z_v), mu = sum_v p_v z_v, on a 3-word vocabulary with W = I."""
    z = torch.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    _, ent = linear_logprobs(z, torch.eye(3), torch.tensor([1]), return_entropy=True, backend="torch")
    (grad,) = torch.autograd.grad(ent.sum(), z)
    p = torch.softmax(z.detach(), -1)
    mu = (p * z.detach()).sum()
    torch.testing.assert_close(ent, -(p * p.log()).sum(-1), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad, p * (mu - z.detach()), atol=1e-6, rtol=1e-6)


def test_bad_inputs_raise():
    hidden, weight, ids, b, _, _ = linear_logprobs_inputs(M=6, V=20)
    with pytest.raises(ValueError, match="hidden sizes differ"):
        linear_logprobs(hidden[:, :-1], weight, ids)
    with pytest.raises(ValueError, match="leading shape"):
        linear_logprobs(hidden, weight, ids[:-1])
    with pytest.raises(ValueError, match="vocabulary size"):
        linear_logprobs(hidden, weight, torch.full_like(ids, weight.shape[0]))
    with pytest.raises(ValueError, match="bias must be"):
        linear_logprobs(hidden, weight, ids, bias=b[:-1])
    for bad_t in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            linear_logprobs(hidden, weight, ids, temperature=bad_t)
    with pytest.raises(TypeError, match="integer"):
        linear_logprobs(hidden, weight, ids.float())
    with pytest.raises(ValueError, match="unknown linear_logprobs backend"):
        linear_logprobs(hidden, weight, ids, backend="nope")
    bad = hidden.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        linear_logprobs(bad, weight, ids, backend="torch")


def test_empty_batch_keeps_the_graph():
    hidden, weight, ids, _, _, _ = linear_logprobs_inputs(M=3, V=20)
    h = hidden[:0].clone().requires_grad_()
    lp, ent = linear_logprobs(h, weight, ids[:0], return_entropy=True)
    assert lp.shape == ent.shape == (0,)
    lp.sum().backward()
    assert h.grad.shape == h.shape


def test_kernel_impl_env_is_honoured_or_falls_back_with_a_line(monkeypatch, caplog):
    monkeypatch.setenv("TTRL_KERNEL_IMPL", "torch")
    backends.reset_backend_cache()
    try:
        assert selected_backend("cpu") == "torch"
        monkeypatch.setenv("TTRL_KERNEL_IMPL", "cuda")  # a backend of the signal ops this op does not have
        backends.reset_backend_cache()
        with caplog.at_level(logging.WARNING, logger="ttrl_lightning.ops"):
            auto = selected_backend("cpu")
        assert auto == ("cpp" if unavailable_reason("cpp") is None else "torch")
        assert "linear_logprobs has no 'cuda' backend" in caplog.text
        if unavailable_reason("cpp") is None:
            monkeypatch.setenv("TTRL_KERNEL_IMPL", "cpp")
            backends.reset_backend_cache()
            assert selected_backend("cpu") == "cpp"
    finally:
        backends.reset_backend_cache()


@pytest.mark.subprocess
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_peak_memory_stays_o_m_times_chunk(backend):
    """Forward + backward at M = 256, H = 16, V = 65536, chunks of 1024: [M, V] float32 logits would add 64 MiB.
    The op may add the [V, H] weight gradient (4 MiB), a few 1 MiB tiles (the logits tile and the torch
    epilogue's temporaries) and allocator slack, well below a quarter of the full logits. Each call is
    measured in a fresh process (tests/ops/_peak_memory.py)."""
    require(backend)
    M, H, V, chunk = 256, 16, 65536, 1024
    full, tile, grad_w = M * V * 4, M * chunk * 4, V * H * 4
    extra = peak_extra_bytes("linear_logprobs", backend)
    bound = grad_w + 8 * tile + (2 << 20)
    assert extra < bound < full / 4, f"peak extra {extra / 2**20:.1f} MiB, bound {bound / 2**20:.0f} MiB"
    extra_full = peak_extra_bytes("linear_logprobs", "reference")
    assert extra_full > full * 0.9, f"materialised reference: peak extra {extra_full / 2**20:.1f} MiB"


def test_triton_tile_blocks_fit_shared_memory_of_every_architecture():
    pytest.importorskip("triton", reason="triton is not installed")
    from ttrl_lightning.ops.linear_logprobs_triton import tile_blocks

    for limit in (166_912, 101_376, 232_448):  # sm_80, sm_89, sm_90 opt-in bytes per block
        for cols in (1, 7, 300, 4096, 8192, 151_936):
            blocks = tile_blocks(cols, limit, interpret=False)
            assert blocks["BLOCK_C"] & (blocks["BLOCK_C"] - 1) == 0 and 2 * blocks["BLOCK_C"] * 4 <= limit
    assert tile_blocks(16, 64, interpret=False)["BLOCK_C"] == 16


@pytest.mark.parametrize("cc", [80, 89, 90])
def test_triton_kernels_compile_for_gpu_architectures(cc):
    """The real compiler (not the interpreter) accepts both kernels for sm_80/89/90, within shared memory."""
    triton = pytest.importorskip("triton", reason="triton is not installed")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ttrl_lightning.ops import linear_logprobs_triton as kernels

    limit = {80: 166_912, 89: 101_376, 90: 232_448}[cc]
    blocks = kernels.tile_blocks(8192, limit, interpret=False)
    rows = {"C": "i32", "v0": "i32", "stride_z": "i32"}
    specs = [
        (kernels._forward_tile_kernel,
         {**{n: "*fp32" for n in ("z_ptr", "ez_ptr", "m_ptr", "s_ptr", "t_ptr", "zy_ptr")}, "ids_ptr": "*i64",
          "alpha_ptr": "*fp32", **rows}, {"WRITE_E": True, "WRITE_EZ": True}),
        (kernels._backward_tile_kernel,
         {**{n: "*fp32" for n in ("z_ptr", "lse_ptr", "mu_ptr", "g_ptr", "gh_ptr")}, "ids_ptr": "*i64",
          **rows},
         {"WITH_ENTROPY": True}),
    ]
    for fn, signature, flags in specs:
        constexprs = {**flags, "BLOCK_C": blocks["BLOCK_C"]}
        src = ASTSource(fn=fn, signature={**signature, **{k: "constexpr" for k in constexprs}},
                        constexprs=constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                                  options={"num_warps": blocks["num_warps"]})
        assert compiled.metadata.shared <= limit


@pytest.mark.subprocess
def test_triton_backend_matches_reference_in_interpreter():
    pytest.importorskip("triton", reason="triton is not installed")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TTRL_KERNEL_IMPL", None)
    script = os.path.join(HERE, "_linear_logprobs_check.py")
    proc = subprocess.run([sys.executable, script, "--backend", "triton"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "matches the reference" in proc.stdout

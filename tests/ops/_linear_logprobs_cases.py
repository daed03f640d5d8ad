"""Inputs and the reference comparison of the linear_logprobs tests (shared by the in-process tests and the
subprocess script that runs the Triton kernels under the interpreter)."""
from __future__ import annotations

import torch

from tests.ops._ops_cases import token_stats_inputs
from ttrl_lightning.ops.linear_logprobs import linear_logprobs
from ttrl_lightning.ops.linear_logprobs_reference import linear_logprobs_reference

# Tolerances against the reference. Both sides compute in float32 from the same (rounded) inputs, so values
# agree to float32 summation noise. Gradients of bfloat16 leaves are rounded to bfloat16 once at the end
# (relative step 2^-8, so at most 2^-9 = 0.2% by rounding to nearest); the reference's are compared in
# float32.
VALUE_TOL = dict(atol=2e-4, rtol=1e-4)
GRAD_TOL = {torch.float32: dict(atol=5e-5, rtol=1e-4), torch.bfloat16: dict(atol=5e-5, rtol=4e-3)}


def linear_logprobs_inputs(dtype=torch.float32, M=41, H=33, V=1271, bias=True, seed=0):
    """token_stats' odd-shaped inputs (every 7th token without a label) plus upstream gradients g, g_H."""
    hidden, weight, ids, b = token_stats_inputs(dtype, M, H, V, bias, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    return hidden, weight, ids, b, torch.randn(M, generator=gen), torch.randn(M, generator=gen)


def compare_with_reference(backend, dtype, bias, temperature, entropy, train_head, M=41, H=33, V=1271,
                           chunk_size=256, device="cpu", seed=0) -> list[str]:
    """Values and gradients (hidden; weight and bias when ``train_head``) of ``linear_logprobs`` against
    autograd through the reference run in float32 on the same rounded inputs. Returns the mismatches."""
    hidden, weight, ids, b, g, g_h = linear_logprobs_inputs(dtype, M, H, V, bias, seed)
    tag = f"{backend} {dtype} bias={bias} T={temperature} entropy={entropy} train_head={train_head}"
    failures = []

    def run(fn, h, w, bb, **kw):
        out = fn(h, w, ids.to(h.device), temperature, bb, entropy, **kw)
        outs = out if entropy else (out,)
        loss = (outs[0] * g.to(h.device)).sum() + (outs[1] * g_h.to(h.device)).sum() if entropy else \
            (outs[0] * g.to(h.device)).sum()
        leaves = [h] + ([w] + ([bb] if bb is not None else []) if train_head else [])
        return outs, torch.autograd.grad(loss, leaves)

    def leaf(t, dt, grad):
        return None if t is None else t.to(device=device, dtype=dt).requires_grad_(grad)

    ours = run(lambda *a, **k: linear_logprobs(*a, backend=backend, chunk_size=chunk_size),
               leaf(hidden, dtype, True), leaf(weight, dtype, train_head), leaf(b, dtype, train_head))
    ref = run(linear_logprobs_reference, leaf(hidden, torch.float32, True),
              leaf(weight, torch.float32, train_head), leaf(b, torch.float32, train_head))
    names = ["logprob", "entropy"][: len(ours[0])]
    for name, got, want in zip(names, ours[0], ref[0]):
        if got.dtype != torch.float32:
            failures.append(f"{tag} {name}: dtype {got.dtype}, expected float32")
        failures += _close(f"{tag} {name}", got, want, VALUE_TOL)
    for name, got, want in zip(["grad hidden", "grad weight", "grad bias"], ours[1], ref[1]):
        if got.dtype != dtype:
            failures.append(f"{tag} {name}: dtype {got.dtype}, expected {dtype}")
        failures += _close(f"{tag} {name}", got, want, GRAD_TOL[dtype])
    return failures


def _close(tag, got, want, tol) -> list[str]:
    try:
        torch.testing.assert_close(got.float().cpu(), want.float().cpu(), **tol)
    except AssertionError as e:
        return [f"{tag}: {e}"]
    return []

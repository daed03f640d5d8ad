"""Backend correctness check: both signal ops of one backend against ops/reference.py on small odd shapes.

In-process: :func:`backend_mismatches` (tests/ops/test_backends.py, for the CPU backends). As a script, on a
GPU machine (benchmarks/gpu_check.sh) or for Triton under its CPU interpreter
(tests/ops/test_triton_interpret.py: triton reads ``TRITON_INTERPRET`` when it is imported, so that check
needs a fresh interpreter)::

    python tests/ops/_backend_check.py --backend cuda --device cuda

exits non-zero listing every mismatch. The backend is selected through ``TTRL_KERNEL_IMPL`` (read at first
use, see ``ttrl_lightning.ops.backends.reset_backend_cache``), so the environment path is exercised too;
``--backend triton --device cpu`` also sets ``TRITON_INTERPRET=1`` before the kernels are defined.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager

if __package__ in (None, ""):  # run as a script: make the repository's `tests` package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from tests.ops._ops_cases import attention_inputs, token_stats_inputs  # noqa: E402
from ttrl_lightning.ops import attention_with_mass, selected_backend, token_stats  # noqa: E402
from ttrl_lightning.ops.backends import ENV_VAR, reset_backend_cache  # noqa: E402
from ttrl_lightning.ops.reference import (  # noqa: E402
    attention_probs_reference,
    attention_with_mass_reference,
    token_stats_reference,
)

SHAPES = [
    dict(Hq=4, Hkv=2, Tq=13, Tk=29, pad=True),
    dict(Hq=3, Hkv=3, Tq=17, Tk=17, pad=False),
    dict(Hq=2, Hkv=1, Tq=1, Tk=19, pad=True),
]


@contextmanager
def backend_environment(backend: str, device: str = "cpu"):
    """``TTRL_KERNEL_IMPL=backend`` (and ``TRITON_INTERPRET=1`` for Triton on CPU) for the duration, with the
    backend cache reset on entry and exit; the environment is restored afterwards."""
    env = {ENV_VAR: backend}
    interpret = backend == "triton" and device == "cpu"
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if interpret and "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        # triton decorates its own standard library (tl.zeros, ...) when it is imported
        raise RuntimeError("TRITON_INTERPRET=1 must be set before triton is imported; run this check in a "
                           "fresh interpreter: python tests/ops/_backend_check.py --backend triton")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    reset_backend_cache()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_backend_cache()


def backend_mismatches(backend: str, device: str = "cpu") -> list[str]:
    """Every mismatch of ``backend`` on ``device`` against the references (empty when all match), the
    backend chosen through ``TTRL_KERNEL_IMPL``."""
    dev = torch.device(device)
    failures: list[str] = []

    def close(name, got, want, atol, rtol):
        try:
            torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=atol, rtol=rtol)
        except AssertionError as e:
            failures.append(f"{name}: {e}")

    with backend_environment(backend, device):
        for dtype in (torch.float32, torch.bfloat16):
            for bias, temp in ((True, 0.7), (False, 1.0)):
                h, w, ids, b = token_stats_inputs(dtype, bias=bias)
                ref = token_stats_reference(h, w, ids, b, temp)
                b_dev = b.to(dev) if b is not None else None
                got = token_stats(h.to(dev), w.to(dev), ids.to(dev), b_dev, temp)
                for name, r, g in zip(("logprob", "entropy", "self_certainty", "lse"), ref, got):
                    close(f"token_stats {dtype} bias={bias} {name}", g, r, 2e-3, 1e-3)

        for dtype in (torch.float32, torch.bfloat16):
            tol = (1e-4, 1e-4) if dtype == torch.float32 else (2e-2, 2e-2)
            for causal in (True, False):
                for shape in SHAPES:
                    q, k, v, g, G = attention_inputs(dtype, **shape)
                    ro, rm = attention_with_mass_reference(q, k, v, g, G, causal)
                    out, mass = attention_with_mass(q.to(dev), k.to(dev), v.to(dev), g.to(dev), G, causal)
                    tag = f"attention {dtype} causal={causal} {shape}"
                    close(tag + " out", out, ro, *tol)
                    # torch backend: the mass channels pass through SDPA's bf16 output (8 mantissa bits); the
                    # kernels accumulate it in fp32
                    mass_tol = 1e-5 if dtype == torch.float32 else (8e-3 if backend == "torch" else 2e-3)
                    close(tag + " mass", mass, rm, mass_tol, 0)
                    sees = (attention_probs_reference(q, k, g, causal).sum(-1) > 0.5).float()
                    close(tag + " mass sum", mass.sum(-1), sees, mass_tol, 0)

        used = selected_backend("token_stats", dev.type), selected_backend("attention_with_mass", dev.type)
        if used != (backend, backend):
            failures.append(f"expected backend {backend}, dispatch selected {used}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default="triton", choices=["triton", "cuda", "cpp", "torch"])
    args = parser.parse_args(argv)
    failures = backend_mismatches(args.backend, args.device)
    if failures:
        print("\n".join(failures))
        return 1
    print(f"{args.backend} backend on {args.device} matches the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())

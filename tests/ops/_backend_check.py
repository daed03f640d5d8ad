"""Backend correctness check, run as a script (in a subprocess by test_ops_triton_interpret.py, and by
benchmarks/gpu_check.sh on a GPU machine).

``--backend triton --device cpu`` sets TRITON_INTERPRET=1 before triton is imported (the reason this is a
separate process). The backend is selected through TTRL_KERNEL_IMPL, so the environment path is exercised
too. Compares with ops/reference.py on small odd shapes and exits non-zero listing every mismatch.
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--backend", default="triton", choices=["triton", "cuda", "cpp", "torch"])
args = parser.parse_args()
if args.device == "cpu" and args.backend == "triton":
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["TTRL_KERNEL_IMPL"] = args.backend
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from _ops_cases import attention_inputs, token_stats_inputs  # noqa: E402
from ttrl_lightning.ops import attention_with_mass, token_stats  # noqa: E402
from ttrl_lightning.ops.reference import (  # noqa: E402
    attention_probs_reference,
    attention_with_mass_reference,
    token_stats_reference,
)

dev = torch.device(args.device)
failures = []


def close(name, got, want, atol, rtol):
    try:
        torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=atol, rtol=rtol)
    except AssertionError as e:
        failures.append(f"{name}: {e}")


for dtype in (torch.float32, torch.bfloat16):
    for bias, temp in ((True, 0.7), (False, 1.0)):
        h, w, ids, b = token_stats_inputs(dtype, bias=bias)
        ref = token_stats_reference(h, w, ids, b, temp)
        got = token_stats(h.to(dev), w.to(dev), ids.to(dev), b.to(dev) if b is not None else None, temp)
        for name, r, g in zip(("logprob", "entropy", "self_certainty", "lse"), ref, got):
            close(f"token_stats {dtype} bias={bias} {name}", g, r, 2e-3, 1e-3)

shapes = [
    dict(Hq=4, Hkv=2, Tq=13, Tk=29, pad=True),
    dict(Hq=3, Hkv=3, Tq=17, Tk=17, pad=False),
    dict(Hq=2, Hkv=1, Tq=1, Tk=19, pad=True),
]
for dtype in (torch.float32, torch.bfloat16):
    tol = (1e-4, 1e-4) if dtype == torch.float32 else (2e-2, 2e-2)
    for causal in (True, False):
        for shape in shapes:
            q, k, v, g, G = attention_inputs(dtype, **shape)
            ro, rm = attention_with_mass_reference(q, k, v, g, G, causal)
            out, mass = attention_with_mass(q.to(dev), k.to(dev), v.to(dev), g.to(dev), G, causal)
            tag = f"attention {dtype} causal={causal} {shape}"
            close(tag + " out", out, ro, *tol)
            # torch backend: the mass channels pass through SDPA's bf16 output (8 mantissa bits); the kernels
            # accumulate it in fp32
            mass_tol = 1e-5 if dtype == torch.float32 else (8e-3 if args.backend == "torch" else 2e-3)
            close(tag + " mass", mass, rm, mass_tol, 0)
            sees = (attention_probs_reference(q, k, g, causal).sum(-1) > 0.5).float()
            close(tag + " mass sum", mass.sum(-1), sees, mass_tol, 0)

from ttrl_lightning.ops import selected_backend  # noqa: E402

used = selected_backend("token_stats", dev.type), selected_backend("attention_with_mass", dev.type)
if used != (args.backend, args.backend):
    failures.append(f"expected backend {args.backend}, dispatch selected {used}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"{args.backend} backend on {args.device} matches the reference")

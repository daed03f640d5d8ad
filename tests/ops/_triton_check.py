"""Run in a subprocess by test_triton_interpret.py: TRITON_INTERPRET=1 must be set before triton is imported.

Compares the Triton backend with ops/reference.py on tiny odd shapes and exits non-zero with a message on
the first mismatch. On a GPU machine (``--device cuda``) the same checks run the compiled kernels.
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
args = parser.parse_args()
if args.device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["TTRL_KERNEL_IMPL"] = "triton"
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
            close(tag + " mass", mass, rm, 2e-3 if dtype == torch.bfloat16 else 1e-5, 0)
            sees = (attention_probs_reference(q, k, g, causal).sum(-1) > 0.5).float()
            close(tag + " mass sum", mass.sum(-1), sees, 2e-3, 0)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("triton backend matches the reference")

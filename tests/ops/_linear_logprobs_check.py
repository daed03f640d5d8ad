"""linear_logprobs values and gradients against autograd through the reference, run as a script.

``--backend triton --device cpu`` sets TRITON_INTERPRET=1 before triton is imported (the reason this is a
separate process: tests/ops/test_linear_logprobs.py runs it in a subprocess). Also usable on a GPU machine
(``--device cuda``). Exits non-zero listing every mismatch.
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--backend", default="triton", choices=["triton", "cpp", "torch"])
args = parser.parse_args()
if args.device == "cpu" and args.backend == "triton":
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from tests.ops._linear_logprobs_cases import compare_with_reference  # noqa: E402

failures = []
cases = [  # (dtype, bias, temperature, entropy, weight grad); small: the interpreter runs one row at a time
    (torch.float32, True, 0.7, True, True),
    (torch.float32, False, 1.0, True, False),
    (torch.bfloat16, True, 1.3, False, True),
]
for dtype, bias, temperature, entropy, train_head in cases:
    failures += compare_with_reference(args.backend, dtype, bias, temperature, entropy, train_head,
                                       M=9, H=13, V=300, chunk_size=128, device=args.device)
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"linear_logprobs {args.backend} backend on {args.device} matches the reference")

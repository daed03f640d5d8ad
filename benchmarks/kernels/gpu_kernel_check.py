"""Correctness of one backend of the signal ops at the head dims models use, per dtype, against the float32
references (ops/reference.py, ops/linear_logprobs_reference.py), on a GPU; a step of benchmarks/gpu_check.sh.

tests/ops/_backend_check.py checks odd small shapes (head dim 24); this adds what a launch on a real device
depends on: head dims 64, 80, 96, 128 and 256 (the Triton launcher picks its blocks from the device's
shared memory per block), causal and not, 2 / 4 / 16 key groups, Tq < Tk, fp32 / bf16 / fp16; token_stats
at H = 64 and 1,024 with and without bias; linear_logprobs values and gradients (backends that have it).

    python -m benchmarks.kernels.gpu_kernel_check --backend triton --device cuda --out check_triton.json

Prints one ``RESULT <backend> <dtype> PASS|FAIL <failed>/<cases>`` line per dtype and writes the JSON
(cases, failures, and for Triton the blocks chosen for the device). ``--quick`` (one head dim, smaller
shapes) is the CPU-safe mode of ``GPU_CHECK_DRY_RUN=1`` (Triton then runs under its interpreter). Exit code
1 when any case fails.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


DTYPES = ("float32", "bfloat16", "float16")
# (out atol/rtol, mass atol) per dtype; the torch backend's bf16/fp16 masses pass through SDPA's 16-bit output
ATTENTION_TOL = {"float32": (1e-4, 1e-5), "bfloat16": (2e-2, 2e-3), "float16": (5e-3, 2e-3)}
TORCH_MASS_TOL = 8e-3
TOKEN_STATS_TOL = (2e-3, 1e-3)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", required=True, choices=["triton", "cuda", "torch", "cpp"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="one head dim and small shapes (CPU dry run)")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def attention_cases(quick):
    if quick:  # the dry run's CPU-safe mode: Triton's interpreter runs one program at a time
        yield dict(d=64, causal=True, G=4, Tq=37, Tk=37)
        yield dict(d=64, causal=False, G=16, Tq=17, Tk=40)
        return
    for d in (64, 80, 96, 128, 256):
        for causal in (True, False):
            for groups, (tq, tk) in ((4, (257, 257)), (16, (100, 300)), (2, (64, 64))):
                yield dict(d=d, causal=causal, G=groups, Tq=tq, Tk=tk)


def token_stats_cases(quick):
    if quick:
        yield dict(H=64, V=1001, M=37, bias=True)
        return
    for H in (64, 1024):
        for bias in (True, False):
            yield dict(H=H, V=5003, M=300, bias=bias)


def check_backend(backend, device, quick):
    import torch

    from tests.ops._ops_cases import attention_inputs, token_stats_inputs
    from ttrl_lightning.ops import attention_with_mass, token_stats
    from ttrl_lightning.ops.reference import attention_with_mass_reference, token_stats_reference

    dev = torch.device(device)
    results = {dt: {"cases": 0, "failures": []} for dt in DTYPES}

    def close(dtype_name, tag, got, want, atol, rtol):
        results[dtype_name]["cases"] += 1
        try:
            torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=atol, rtol=rtol)
        except AssertionError as e:
            results[dtype_name]["failures"].append(f"{tag}: {str(e).splitlines()[-1] if str(e) else e}")
        except Exception as e:  # noqa: BLE001 - a shape/dtype error is a failure of this case
            results[dtype_name]["failures"].append(f"{tag}: {type(e).__name__}: {e}")

    def run_case(dtype_name, tag, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - a launch error (out of resources, ...) is a failure
            results[dtype_name]["cases"] += 1
            results[dtype_name]["failures"].append(f"{tag}: {type(e).__name__}: {str(e)[:300]}")

    for dtype_name in DTYPES:
        dtype = getattr(torch, dtype_name)
        out_tol, mass_tol = ATTENTION_TOL[dtype_name]
        if backend == "torch" and dtype != torch.float32:
            mass_tol = TORCH_MASS_TOL
        for case in attention_cases(quick):
            tag = f"attention {dtype_name} d={case['d']} causal={case['causal']} G={case['G']} " \
                  f"Tq={case['Tq']} Tk={case['Tk']}"

            def attention(case=case, tag=tag, dtype=dtype):
                q, k, v, g, G = attention_inputs(dtype, B=2, Hq=4, Hkv=2, Tq=case["Tq"], Tk=case["Tk"], d=case["d"],
                                                 G=case["G"], pad=True)
                ro, rm = attention_with_mass_reference(q, k, v, g, G, case["causal"])
                out, mass = attention_with_mass(q.to(dev), k.to(dev), v.to(dev), g.to(dev), G, case["causal"],
                                                backend=backend)
                close(dtype_name, tag + " out", out, ro, out_tol, out_tol)
                close(dtype_name, tag + " mass", mass, rm, mass_tol, 0)
            run_case(dtype_name, tag, attention)
        for case in token_stats_cases(quick):
            tag = f"token_stats {dtype_name} H={case['H']} V={case['V']} bias={case['bias']}"

            def stats(case=case, tag=tag, dtype=dtype):
                h, w, ids, b = token_stats_inputs(dtype, M=case["M"], H=case["H"], V=case["V"], bias=case["bias"])
                h = h / case["H"] ** 0.5 * 8  # logits of a realistic scale at any H
                ref = token_stats_reference(h, w, ids, b, 0.7)
                got = token_stats(h.to(dev), w.to(dev), ids.to(dev), b.to(dev) if b is not None else None, 0.7,
                                  backend=backend)
                for name, r, x in zip(("logprob", "entropy", "self_certainty", "lse"), ref, got):
                    close(dtype_name, f"{tag} {name}", x, r, *TOKEN_STATS_TOL)
            run_case(dtype_name, tag, stats)
    return results


def check_linear_logprobs(backend, device, quick, results):
    from tests.ops._linear_logprobs_cases import compare_with_reference

    cases = [("float32", True, 0.7, True, True), ("float32", False, 1.0, True, False),
             ("bfloat16", True, 1.3, False, True), ("bfloat16", False, 1.0, True, False)]
    if quick:
        cases = cases[::2]
    shape = dict(M=9, H=13, V=300, chunk_size=128) if quick else dict(M=200, H=256, V=5003, chunk_size=2048)
    import torch

    for dtype_name, bias, temperature, entropy, train_head in cases:
        results[dtype_name]["cases"] += 1
        try:
            results[dtype_name]["failures"] += compare_with_reference(
                backend, getattr(torch, dtype_name), bias, temperature, entropy, train_head, device=device, **shape)
        except Exception as e:  # noqa: BLE001
            results[dtype_name]["failures"].append(f"linear_logprobs {dtype_name}: {type(e).__name__}: {e}")


def chosen_blocks(device):
    """The Triton launchers' choice for this device (attention per dtype and head dim, token_stats per dtype)."""
    from ttrl_lightning.ops import triton_impl

    limit = triton_impl.device_shared_limit(device)
    attn = {f"{dt} d={d}": {k: v for k, v in triton_impl.attention_blocks(dt, d, limit).items()
                            if k in ("BLOCK_M", "BLOCK_N", "BLOCK_D", "num_stages")}
            for dt in ("fp32", "bf16", "fp16") for d in (64, 80, 96, 128, 256)}
    stats = {dt: {k: v for k, v in triton_impl.token_stats_blocks(dt, limit).items()
                  if k in ("BLOCK_M", "BLOCK_V", "BLOCK_H", "num_stages")} for dt in ("fp32", "bf16", "fp16")}
    return {"shared_limit": limit, "attention": attn, "token_stats": stats}


def main(argv=None):
    args = parse_args(argv)
    if args.backend == "triton" and args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    t0 = time.perf_counter()
    results = check_backend(args.backend, args.device, args.quick)
    if args.backend in ("triton", "torch", "cpp"):
        check_linear_logprobs(args.backend, args.device, args.quick, results)
    report = {"backend": args.backend, "device": args.device, "quick": args.quick, "torch": torch.__version__,
              "seconds": round(time.perf_counter() - t0, 1), "results": results}
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name(0)
    if args.backend == "triton":
        import triton

        report["triton"] = triton.__version__
        report["blocks"] = chosen_blocks(torch.device(args.device))
        print("triton blocks for this device:", json.dumps(report["blocks"]))
    failed = False
    for dtype_name, r in results.items():
        status = "PASS" if not r["failures"] else "FAIL"
        failed |= bool(r["failures"])
        print(f"RESULT {args.backend} {dtype_name} {status} {len(r['failures'])}/{r['cases']}")
        for line in r["failures"][:10]:
            print("   ", line)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

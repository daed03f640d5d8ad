"""Benchmark: forward + backward of linear_logprobs vs materialised logits + log_softmax + gather.

Default size is the issue's: V = 151,936 (Qwen vocabulary), H = 1024, M = 4096 tokens, on CPU, float32.
Each step computes per-token log-probs, weights them with a fixed random upstream gradient g [M] (as a
policy-gradient loss does) and back-propagates into hidden and the LM head weight (``--frozen-head``: into
hidden only, e.g. LoRA). Peak extra memory: each candidate once in its own process (see _memory.py); it
includes the gradients themselves (the [V, H] weight gradient: 594 MiB at the default size). Time: all
candidates in one process, called in turns (``--repeats`` rounds), medians compared. Targets: peak extra
memory <= 1/10 of the materialised step's and time <= 1.2x. Usage:

    python benchmarks/train_logprobs.py                                   # CPU, issue size
    python benchmarks/train_logprobs.py --M 1024                          # smaller
    python benchmarks/train_logprobs.py --device cuda --dtype bfloat16    # GPU (triton backend)
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _memory import (add_protocol_args, measure_candidates, mib, peak_extra_memory,  # noqa: E402
                     protocol_argv, time_interleaved, write_json)

CANDIDATES = {"cpu": ["materialised", "fused_cpp", "fused_torch"],
              "cuda": ["materialised", "fused_triton", "fused_torch"]}
MEMORY_TARGET, TIME_TARGET = 1 / 10, 1.2


def build(args):
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    hidden = torch.randn(args.M, args.H, generator=gen).to(dtype).to(args.device).requires_grad_()
    weight = (torch.randn(args.V, args.H, generator=gen) * 0.02).to(dtype).to(args.device)
    weight.requires_grad_(not args.frozen_head)
    ids = torch.randint(0, args.V, (args.M,), generator=gen).to(args.device)
    g = torch.randn(args.M, generator=gen).to(args.device)
    return hidden, weight, ids, g


def materialised(hidden, weight, ids):
    """The plain way: [M, V] logits, log_softmax in float32, gather (autograd keeps the [M, V] tensors)."""
    import torch

    logp = torch.log_softmax((hidden @ weight.t()).float(), dim=-1)
    return logp.gather(1, ids[:, None])[:, 0]


def candidate(name, hidden, weight, ids, g):
    from ttrl_lightning.ops import linear_logprobs

    if name == "materialised":
        forward = lambda: materialised(hidden, weight, ids)  # noqa: E731
    else:
        backend = name.split("_", 1)[1]
        forward = lambda: linear_logprobs(hidden, weight, ids, backend=backend)  # noqa: E731

    def step():
        hidden.grad = weight.grad = None
        logprob = forward()
        (logprob * g).sum().backward()
        return logprob

    return step


def worker(args):
    """Memory of one candidate (fresh process) or, with --worker timing, interleaved times of all."""
    import torch

    hidden, weight, ids, g = build(args)
    if args.worker == "timing":
        fns = {n: candidate(n, hidden, weight, ids, g) for n in args.names.split(",")}
        result = time_interleaved(fns, args.device, args.repeats)
    else:
        fn = candidate(args.worker, hidden, weight, ids, g)
        result = peak_extra_memory(fn, args.device)
        logprob = fn()
        result["check"] = {"logprob_mean": float(logprob.double().mean()),
                           "grad_hidden_norm": float(hidden.grad.double().norm())}
        if weight.grad is not None:
            result["check"]["grad_weight_norm"] = float(weight.grad.double().norm())
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--M", "--m", dest="M", type=int, default=4096)
    p.add_argument("--H", type=int, default=1024)
    p.add_argument("--V", type=int, default=151936)
    p.add_argument("--frozen-head", action="store_true",
                   help="the head gets no gradient (LoRA / frozen lm_head)")
    add_protocol_args(p, CANDIDATES, repeats=3, out="outputs/benchmarks/train_logprobs.json")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    names = args.candidates.split(",") if args.candidates else CANDIDATES[args.device]
    common = ["--M", str(args.M), "--H", str(args.H), "--V", str(args.V)] + protocol_argv(args)
    common += ["--frozen-head"] if args.frozen_head else []
    script = os.path.abspath(__file__)
    results, timing = measure_candidates(script, names, common)
    base = results.get("materialised")
    head = "frozen head" if args.frozen_head else "trainable head"
    print(f"\nlinear_logprobs forward + backward ({head})  M={args.M} H={args.H} V={args.V} {args.dtype} on "
          f"{args.device} (threads={timing['threads']}, {args.repeats} interleaved timing rounds)")
    print(f"{'candidate':<16}{'peak extra MiB':>16}{'median s':>11}{'mem / base':>12}{'time / base':>13}")
    for name, r in results.items():
        r["mem_ratio"] = r["peak_extra_bytes"] / base["peak_extra_bytes"] if base else float("nan")
        r["time_ratio"] = r["median_s"] / base["median_s"] if base else float("nan")
        print(f"{name:<16}{mib(r['peak_extra_bytes']):>16.1f}{r['median_s']:>11.3f}{r['mem_ratio']:>12.4f}"
              f"{r['time_ratio']:>13.3f}")
    if base:
        for name, r in results.items():
            for stat, value in r["check"].items():
                want = base["check"][stat]
                if abs(value - want) > 1e-3 * max(1.0, abs(want)):
                    print(f"[MISMATCH] {name} {stat}: {value} vs baseline {want}")
        for name, r in results.items():
            if name == "materialised":
                continue
            mem_ok, time_ok = r["mem_ratio"] <= MEMORY_TARGET, r["time_ratio"] <= TIME_TARGET
            print(f"target {name}: memory <= 1/10 of baseline: {'PASS' if mem_ok else 'FAIL'} "
                  f"({1 / r['mem_ratio']:.1f}x less); "
                  f"time <= {TIME_TARGET}x: {'PASS' if time_ok else 'FAIL'} "
                  f"({r['time_ratio']:.3f}x)")
    from ttrl_lightning.ops import selected_backend

    auto = selected_backend("linear_logprobs", args.device)
    print(f"auto backend for linear_logprobs on {args.device}: {auto}")
    write_json(args.out, {"config": vars(args), "auto_backend": auto, "results": results})


if __name__ == "__main__":
    main()

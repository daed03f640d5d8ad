"""Benchmark: forward + backward of linear_logprobs vs materialised logits + log_softmax + gather.

Default size is the issue's: V = 151,936 (Qwen vocabulary), H = 1024, M = 4096 tokens, on CPU, float32.
Each step computes per-token log-probs, weights them with a fixed random upstream gradient g [M] (as a
policy-gradient loss does) and back-propagates into hidden and the LM head weight (``--frozen-head``: into
hidden only, e.g. LoRA). Peak extra memory: each candidate once in its own process (see ``benchmarks.common``); it
includes the gradients themselves (the [V, H] weight gradient: 594 MiB at the default size). Time: all
candidates in one process, called in turns (``--repeats`` rounds), medians compared. Targets: peak extra
memory <= 1/10 of the materialised step's and time <= 1.2x. Usage:

    python -m benchmarks.kernels.train_logprobs                                   # CPU, issue size
    python -m benchmarks.kernels.train_logprobs --M 1024                          # smaller
    python -m benchmarks.kernels.train_logprobs --device cuda --dtype bfloat16    # GPU (triton backend)
"""
from __future__ import annotations

import argparse
import json

from benchmarks.common import (add_protocol_args, measure_candidates, peak_extra_memory, protocol_argv,
                     report_auto_backend, report_ratios, time_interleaved)

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
    results, timing = measure_candidates(__spec__.name, names, common)
    head = "frozen head" if args.frozen_head else "trainable head"
    report_ratios(f"linear_logprobs forward + backward ({head})  M={args.M} H={args.H} V={args.V} "
                  f"{args.dtype} on {args.device} (threads={timing['threads']}, {args.repeats} interleaved "
                  "timing rounds)",
                  results, MEMORY_TARGET, TIME_TARGET)
    report_auto_backend("linear_logprobs", args, results)


if __name__ == "__main__":
    main()

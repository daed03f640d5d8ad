"""Benchmark: fused token_stats vs materialising logits + log_softmax (peak extra memory and time).

Default size is the issue's: V = 151,936 (Qwen vocabulary), H = 1024, M = 4096 tokens, on CPU, float32.
Peak extra memory: each candidate once in its own process (see ``benchmarks.common``). Time: all candidates in one
process, called in turns (``--repeats`` rounds), medians compared. Targets: fused peak extra memory
<= 1/20 of the baseline's and time no slower. Usage:

    python -m benchmarks.kernels.token_stats                                   # CPU, issue size
    python -m benchmarks.kernels.token_stats --device cuda --dtype bfloat16    # GPU (triton / cuda backends)
"""
from __future__ import annotations

import argparse
import json
import math

from benchmarks.common import (add_protocol_args, measure_candidates, peak_extra_memory, protocol_argv,
                     report_auto_backend, report_ratios, time_interleaved)

CANDIDATES = {"cpu": ["materialised", "fused_cpp", "fused_torch"],
              "cuda": ["materialised", "fused_triton", "fused_cuda", "fused_torch"]}
MEMORY_TARGET, TIME_TARGET = 1 / 20, 1.0


def build(args):
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    hidden = torch.randn(args.M, args.H, generator=gen).to(dtype)
    weight = (torch.randn(args.V, args.H, generator=gen) * 0.02).to(dtype)
    ids = torch.randint(0, args.V, (args.M,), generator=gen)
    return hidden.to(args.device), weight.to(args.device), ids.to(args.device)


def materialised(hidden, weight, ids):
    """The plain way: [M, V] logits, log_softmax, then the statistics from the [M, V] log-probs."""
    import torch

    logits = hidden @ weight.t()
    logp = torch.log_softmax(logits.float(), dim=-1)
    del logits
    logprob = logp.gather(1, ids[:, None])[:, 0]
    entropy = -(logp.exp() * logp).sum(-1)
    self_certainty = -logp.mean(-1) - math.log(weight.shape[0])
    return logprob, entropy, self_certainty


def candidate(name, hidden, weight, ids):
    from ttrl_lightning.ops import token_stats

    if name == "materialised":
        return lambda: materialised(hidden, weight, ids)
    backend = name.split("_", 1)[1]
    return lambda: token_stats(hidden, weight, ids, backend=backend)[:3]


def worker(args):
    """Memory of one candidate (fresh process) or, with --worker timing, interleaved times of all."""
    import torch

    hidden, weight, ids = build(args)
    if args.worker == "timing":
        fns = {n: candidate(n, hidden, weight, ids) for n in args.names.split(",")}
        result = time_interleaved(fns, args.device, args.repeats)
    else:
        fn = candidate(args.worker, hidden, weight, ids)
        result = peak_extra_memory(fn, args.device)
        out = fn()
        names = ("logprob", "entropy", "self_certainty")
        result["check"] = {k: float(v.double().mean()) for k, v in zip(names, out)}
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--M", type=int, default=4096)
    p.add_argument("--H", type=int, default=1024)
    p.add_argument("--V", type=int, default=151936)
    add_protocol_args(p, CANDIDATES, repeats=3, out="outputs/benchmarks/token_stats.json")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    names = args.candidates.split(",") if args.candidates else CANDIDATES[args.device]
    common = ["--M", str(args.M), "--H", str(args.H), "--V", str(args.V)] + protocol_argv(args)
    results, timing = measure_candidates(__spec__.name, names, common)
    report_ratios(f"token_stats  M={args.M} H={args.H} V={args.V} {args.dtype} on {args.device} "
                  f"(threads={timing['threads']}, {args.repeats} interleaved timing rounds)", results,
                  MEMORY_TARGET, TIME_TARGET)
    report_auto_backend("token_stats", args, results)


if __name__ == "__main__":
    main()

"""Benchmark: batched torch Dawid--Skene (ttrl_lightning) vs crowd-kit's DawidSkene on the same labels.

Both run the same algorithm (ours with init="soft", smoothing=0: crowd-kit's soft majority-vote start;
crowd-kit without initial errors) for the same number
of E-steps with early stopping off, so the timings compare like with like; agreement is reported as the
share of identical argmax labels and the max absolute posterior difference.

Cases:
  single:  one problem, --items x --annotators labels (--missing of them absent), --classes classes;
  batched: --queries independent problems (one per query: --query-items items labelled by --rollouts
           rollouts, --query-classes classes). Ours solves all queries in one batched call; crowd-kit
           fits one model per query, timed on the first --baseline-queries queries (per-query time is
           reported for both; pass --baseline-queries equal to --queries to time crowd-kit on all).

Torch runs single-threaded by default (--threads 1), like crowd-kit's pandas code.

Run:  python -m benchmarks.labelers.dawid_skene [--out outputs/bench_dawid_skene.json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ttrl_lightning.consensus.dawid_skene import dawid_skene


def simulate(generator: torch.Generator, batch: int, items: int, annotators: int, classes: int,
             missing: float):
    """[B, N, J] labels by annotators of accuracy U(0.25, 0.95) (else a uniform random class); -1 = missing."""
    truth = torch.randint(0, classes, (batch, items), generator=generator)
    accuracy = torch.rand(batch, 1, annotators, generator=generator) * 0.7 + 0.25
    noise = torch.randint(0, classes, (batch, items, annotators), generator=generator)
    correct = torch.rand(batch, items, annotators, generator=generator) < accuracy
    labels = torch.where(correct, truth[..., None], noise)
    if missing > 0:
        drop = torch.rand(batch, items, annotators, generator=generator) < missing
        drop[..., 0] &= ~drop.all(dim=-1)  # keep at least one label per item
        labels = labels.masked_fill(drop, -1)
    return labels, truth


def crowdkit_fit(labels: torch.Tensor, classes: int, n_iter: int) -> tuple[np.ndarray, float]:
    """crowd-kit DawidSkene on one [N, J] problem, exactly n_iter iterations -> (probas [N, C], seconds)."""
    from crowdkit.aggregation import DawidSkene

    task, worker = (labels >= 0).nonzero(as_tuple=True)
    df = pd.DataFrame({"task": task.numpy(), "worker": worker.numpy(), "label": labels[task, worker].numpy()})
    start = time.perf_counter()
    model = DawidSkene(n_iter=n_iter, tol=-math.inf).fit(df)
    seconds = time.perf_counter() - start
    probas = model.probas_.reindex(index=range(labels.shape[0]), columns=range(classes), fill_value=0.0)
    return probas.to_numpy(dtype=np.float64), seconds


def time_ours(labels: torch.Tensor, classes: int, iters: int, repeats: int):
    best, out = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = dawid_skene(labels, classes, max_iter=iters, tol=0.0, smoothing=0.0, init="soft", return_info=True)
        best = min(best, time.perf_counter() - start)
    return out, best


def agreement(ours: torch.Tensor, theirs: np.ndarray) -> dict:
    theirs_t = torch.from_numpy(np.ascontiguousarray(theirs))
    return {
        "argmax_agreement": float((ours.argmax(-1) == theirs_t.argmax(-1)).double().mean()),
        "max_abs_posterior_diff": float((ours - theirs_t).abs().max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--annotators", type=int, default=32)
    ap.add_argument("--classes", type=int, default=6)
    ap.add_argument("--missing", type=float, default=0.7, help="share of missing labels, single case")
    ap.add_argument("--queries", type=int, default=512)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--query-items", type=int, default=16)
    ap.add_argument("--query-classes", type=int, default=4)
    ap.add_argument("--baseline-queries", type=int, default=32)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; 1 (default) like crowd-kit's pandas, 0 = torch's default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="outputs/bench_dawid_skene.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(args.seed)
    import crowdkit

    result = {
        "config": vars(args),
        "env": {"torch": torch.__version__, "crowdkit": getattr(crowdkit, "__version__", "?"),
                "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                "python": platform.python_version()},
    }

    # ------------------------------------------------------------------ single large problem
    labels, truth = simulate(gen, 1, args.items, args.annotators, args.classes, args.missing)
    labels, truth = labels[0], truth[0]
    (post, _, _, info), ours_s = time_ours(labels, args.classes, args.iters, args.repeats)
    iters = int(info["iterations"])
    # ours(K) = K+1 E-steps; crowd-kit(n) returns the n-th E-step: n = K+1 gives the same posteriors
    ck_probas, ck_s = crowdkit_fit(labels, args.classes, iters + 1)
    single = {"shape": list(labels.shape), "em_iterations": iters, "ours_s": ours_s, "crowdkit_s": ck_s,
              "speedup": ck_s / ours_s, "ours_s_per_e_step": ours_s / (iters + 1),
              "crowdkit_s_per_e_step": ck_s / (iters + 1),
              "accuracy_vs_truth": float((post.argmax(-1) == truth).double().mean()),
              **agreement(post, ck_probas)}
    result["single"] = single
    print(f"single  {args.items} items x {args.annotators} annotators x {args.classes} classes, "
          f"{iters} EM iterations: ours {ours_s * 1e3:.1f} ms | crowd-kit {ck_s * 1e3:.1f} ms | "
          f"speedup x{single['speedup']:.1f} | argmax agreement {single['argmax_agreement']:.4f} | "
          f"max |dp| {single['max_abs_posterior_diff']:.2e}")

    # ------------------------------------------------------------------ many small problems (one per query)
    labels, truth = simulate(gen, args.queries, args.query_items, args.rollouts, args.query_classes, 0.0)
    (post, _, _, info), ours_s = time_ours(labels, args.query_classes, args.iters, args.repeats)
    n_base = min(args.baseline_queries, args.queries)
    ck_total, agree, maxdiff = 0.0, [], 0.0
    for q in range(n_base):
        probas, seconds = crowdkit_fit(labels[q], args.query_classes, int(info["iterations"][q]) + 1)
        ck_total += seconds
        a = agreement(post[q], probas)
        agree.append(a["argmax_agreement"])
        maxdiff = max(maxdiff, a["max_abs_posterior_diff"])
    ours_per_q, ck_per_q = ours_s / args.queries, ck_total / n_base
    batched = {"shape": list(labels.shape), "em_iterations_max": int(info["iterations"].max()),
               "ours_total_s": ours_s, "ours_per_query_s": ours_per_q,
               "crowdkit_queries_timed": n_base, "crowdkit_total_s": ck_total,
               "crowdkit_per_query_s": ck_per_q,
               "speedup_per_query": ck_per_q / ours_per_q,
               "argmax_agreement": float(np.mean(agree)), "max_abs_posterior_diff": maxdiff}
    result["batched"] = batched
    print(f"batched {args.queries} queries x {args.query_items} items x {args.rollouts} rollouts x "
          f"{args.query_classes} classes: ours {ours_s * 1e3:.1f} ms for all "
          f"({ours_per_q * 1e6:.1f} us/query) | crowd-kit {ck_per_q * 1e3:.1f} ms/query (timed on {n_base}) | "
          f"speedup x{batched['speedup_per_query']:.0f} | argmax agreement {batched['argmax_agreement']:.4f} | "
          f"max |dp| {maxdiff:.2e}")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Benchmark: the full VisConf Table-1 protocol, vectorised, against a straightforward per-question loop.

Pool: synthetic (``ttrl_lightning.data.simulate``), 4,230 questions x 32 rollouts x 256 tokens, two views.
Protocol: all methods (4 Borda exponents), N in {8, 16, 32}, 100 fixed subsets, bootstrap excluded.

The baseline is :mod:`ttrl_lightning.eval.bon.oracle` (the public API, question by question, subset by
subset). Running it on all 4,230 questions would take hours, so it is timed on ``--loop-questions``
questions drawn at random and its per-question time is scaled to the pool; the printed ratio says so.
On those questions both implementations must give identical per-question accuracies (checked here).

    python -m benchmarks.labelers.bon_harness [--questions 4230 --loop-questions 8 --out outputs/bench_bon_harness.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from ttrl_lightning.data.simulate import simulate_pool
from ttrl_lightning.eval.bon.protocol import DEFAULT_METHODS, BoNConfig, evaluate_pool
from ttrl_lightning.eval.bon.oracle import evaluate_question
from ttrl_lightning.eval.bon.subsets import fixed_subsets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=4230)
    ap.add_argument("--rollouts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--subsets", type=int, default=100)
    ap.add_argument("--loop-questions", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="outputs/bench_bon_harness.json")
    args = ap.parse_args()

    t0 = time.perf_counter()
    pool = simulate_pool(num_questions=args.questions, rollouts=args.rollouts, tokens=args.tokens, seed=args.seed)
    t_sim = time.perf_counter() - t0
    cfg = BoNConfig(ns=(8, 16, 32), subsets=args.subsets, seed=args.seed)
    ns = [n for n in cfg.ns if n <= args.rollouts]
    cfg.ns = tuple(ns)

    t0 = time.perf_counter()
    res = evaluate_pool(pool, DEFAULT_METHODS, cfg, progress=True)
    t_vec = time.perf_counter() - t0

    # baseline: the per-question loop on a random sample of questions, same subsets
    gen = torch.Generator().manual_seed(args.seed + 1)
    sample = torch.randperm(pool.num_questions, generator=gen)[: args.loop_questions].tolist()
    r0, r1 = pool.num_rollouts_in_view(0), pool.num_rollouts_in_view(1)
    subsets = {n: fixed_subsets(pool.num_questions, (r0, r1), n, cfg.subsets, cfg.seed) for n in cfg.ns}
    t0 = time.perf_counter()
    max_diff = 0.0
    for q in sample:
        for n in cfg.ns:
            idx, idx1 = subsets[n]
            rows = [evaluate_question(pool, q, idx[q, s].tolist(), idx1[q, s].tolist(), DEFAULT_METHODS, cfg)
                    for s in range(idx.shape[1])]
            for m in rows[0]:
                ref = sum(r[m] for r in rows) / len(rows)
                max_diff = max(max_diff, abs(ref - float(res.per_question[m][n][q])))
    t_loop_sample = time.perf_counter() - t0
    t_loop_est = t_loop_sample / len(sample) * pool.num_questions

    out = {
        "pool": {"questions": args.questions, "rollouts": args.rollouts, "tokens": args.tokens, "views": 2,
                 "simulate_seconds": round(t_sim, 2)},
        "protocol": {"methods": len(res.per_question), "ns": list(cfg.ns), "subsets": cfg.subsets},
        "vectorised_seconds": round(t_vec, 2),
        "loop_questions_timed": len(sample),
        "loop_seconds_on_sample": round(t_loop_sample, 2),
        "loop_seconds_scaled_to_pool": round(t_loop_est, 1),
        "speedup": round(t_loop_est / t_vec, 1),
        "max_abs_accuracy_difference_on_sample": max_diff,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=2)
    print(f"pool: {args.questions} questions x {args.rollouts} rollouts x {args.tokens} tokens x 2 views "
          f"(simulated in {t_sim:.1f} s)")
    print(f"protocol: {len(res.per_question)} methods, N in {list(cfg.ns)}, {cfg.subsets} subsets")
    print(f"vectorised harness : {t_vec:8.1f} s for the whole pool")
    print(f"per-question loop  : {t_loop_sample:8.1f} s for {len(sample)} questions -> "
          f"{t_loop_est:8.0f} s scaled to {pool.num_questions} questions")
    print(f"speed ratio (loop / vectorised): {t_loop_est / t_vec:.0f}x; "
          f"max |accuracy difference| on the timed questions: {max_diff:.2e}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

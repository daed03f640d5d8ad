"""``ttrl bon``: best-of-N evaluation of selection methods on a rollout pool (VisConf Table-1 protocol)."""
from __future__ import annotations

import argparse
import os
import sys
import time

from ..eval.bon import DEFAULT_METHODS, BoNConfig, evaluate_pool
from ..eval.report import build_report, format_table, plot_accuracy, write_report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ttrl bon", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--pool", required=True, help="pool file (.jsonl or .parquet; see README 'Rollout pools')")
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), help="methods to evaluate")
    p.add_argument("--n", nargs="+", type=int, default=[8, 16, 32], help="budgets N")
    p.add_argument("--subsets", type=int, default=100, help="fixed subsets per question for N < pool size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--borda-p", nargs="+", type=float, default=[0.3, 0.7, 1.2, 2.0], help="Borda exponents")
    p.add_argument("--lookback-alpha", type=float, default=0.5)
    p.add_argument("--lookback-lambda", type=float, default=1.25)
    p.add_argument("--visconf-alpha", type=float, default=None, help="None: Z = V C; else V^a C^(1-a)")
    p.add_argument("--target", default="visconf_rwc", help="method compared with every other by bootstrap")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap replicates (0: none)")
    p.add_argument("--out", default="outputs/bon_report.json", help="report JSON (a PNG plot is written beside it)")
    p.add_argument("--no-progress", action="store_true")
    return p


def bon_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from ..data.pool import load_pool

    t0 = time.perf_counter()
    pool = load_pool(args.pool)
    t_load = time.perf_counter() - t0
    cfg = BoNConfig(ns=tuple(args.n), subsets=args.subsets, seed=args.seed, borda_p=tuple(args.borda_p),
                    lookback_alpha=args.lookback_alpha, lookback_lambda=args.lookback_lambda,
                    visconf_alpha=args.visconf_alpha)
    t1 = time.perf_counter()
    result = evaluate_pool(pool, args.methods, cfg, progress=not args.no_progress)
    t_eval = time.perf_counter() - t1
    target = args.target if args.bootstrap > 0 and args.target in result.per_question else None
    if args.bootstrap > 0 and target is None:
        print(f"ttrl bon: bootstrap target {args.target!r} not evaluated; no confidence intervals",
              file=sys.stderr)
    report = build_report(result, target, replicates=max(1, args.bootstrap), seed=args.seed,
                          meta={"pool": os.path.basename(args.pool), "questions": pool.num_questions,
                                "load_seconds": round(t_load, 3), "eval_seconds": round(t_eval, 3)})
    write_report(report, args.out)
    png = os.path.splitext(args.out)[0] + ".png"
    plot_accuracy(report, png, title=f"Best-of-N on {os.path.basename(args.pool)} ({pool.num_questions} questions)")
    print(format_table(report))
    print(f"\n{pool.num_questions} questions, evaluated in {t_eval:.1f} s; report: {args.out}; plot: {png}")
    return 0 if result.complete else 130

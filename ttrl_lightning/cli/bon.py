"""``ttrl bon``: best-of-N evaluation of selection methods on a rollout pool (VisConf Table-1 protocol).

Every option is checked before the pool is read (:mod:`.arguments`; a bad one is one line naming the flag,
exit 1), and the budgets against the pool right after it is read (``N <= pool size``). The report and its
plot are written atomically (:mod:`ttrl_lightning.safe_files`). On Ctrl-C the questions finished so far are
reported in ``NAME.partial.json`` (and its plot) beside ``--out NAME.json``, so a complete report of an
earlier run is never replaced by a partial one; the exit code is then 130 (143 on SIGTERM, which the ``ttrl``
dispatcher turns into the same interrupt).

Several pools (``--pool a b c``, one per benchmark) are evaluated one after the other; the table and
``report["accuracy"]`` are their macro average, ``report["per_pool"]`` holds each pool's accuracies, and
the bootstrap resamples questions within each pool (:mod:`ttrl_lightning.eval.bon.benchmarks`, VisConf App.
B.2). ``--auc`` adds VisConf's Table 6 (:mod:`ttrl_lightning.eval.bon.auc`): the within-question AUROC of every
per-rollout score for correctness, in ``report["auc"]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from ..errors import UserError
from ..eval.bon.protocol import DEFAULT_METHODS, BoNConfig, evaluate_pool
from ..eval.bon.methods import BON_METHODS, PlannedMethod, expand_methods
from ..eval.bon.report import build_report, format_table, plot_accuracy, write_report
from ..safe_files import partial_path, same_file
from .arguments import (EXIT_CODES, CommandParser, nonnegative_float, nonnegative_int, positive_float,
                        given, positive_int, refuse_duplicates, seed, unit_float)
from .termination import interrupt_exit

#: The method every other one is compared with by the paired bootstrap, unless ``--target`` says otherwise.
DEFAULT_TARGET = "visconf_rwc"

DESCRIPTION = """Best-of-N evaluation of selection methods on a rollout pool (VisConf's Table-1 protocol).

For each budget N below the pool size R, --subsets fixed subsets of N rollouts per question are drawn
without replacement (seeded by --seed, shared by all methods); N = R uses the full pool once. Accuracy is
averaged over a question's subsets, then over the questions that have a gold answer (the others are left
out and counted in the report). A paired question-cluster bootstrap compares --target with every other
method.

N <= pool size: every N must be at most the number of original-view rollouts per question of the pool;
for the two-view methods (hms, dual_view_majority) N counts rollouts per view and must also be at most the
number of reframed-view rollouts. A larger N is refused (exit 1).

Writes --out NAME.json (strict JSON) and its plot NAME.png beside it. On Ctrl-C the finished questions
are written to NAME.partial.json and NAME.partial.png instead, leaving an earlier complete report as it
was."""


def build_parser() -> CommandParser:
    p = CommandParser(prog="ttrl bon", description=DESCRIPTION, epilog=EXIT_CODES)
    p.add_argument("--pool", required=True, nargs="+", metavar="FILE",
                   help="the rollout pool, .jsonl or .parquet (see README 'Rollout pools'); several "
                        "pools (one per benchmark): macro-averaged accuracy, bootstrap stratified within "
                        "each pool")
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), metavar="METHOD",
                   help=f"methods to evaluate, each once; one of {', '.join(BON_METHODS.names())}, or "
                        "self_certainty_borda_p<p> for one Borda exponent p > 0")
    p.add_argument("--n", nargs="+", type=positive_int, default=[8, 16, 32], metavar="N",
                   help="budgets N (rollouts per question), distinct integers >= 1 and <= the pool size")
    p.add_argument("--subsets", type=positive_int, default=100,
                   help="fixed subsets per question for each N below the pool size (>= 1)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the subsets and of the bootstrap")
    p.add_argument("--borda-p", nargs="+", type=positive_float, default=[0.3, 0.7, 1.2, 2.0], metavar="P",
                   help="distinct Borda exponents p > 0 of self_certainty_borda (one report entry each)")
    p.add_argument("--lookback-alpha", type=nonnegative_float, default=0.5,
                   help="LookBack's alpha (>= 0), the weight of log image attention")
    p.add_argument("--lookback-lambda", type=nonnegative_float, default=1.25,
                   help="LookBack's lambda (>= 0), the exponent of the per-token attention weights")
    p.add_argument("--visconf-alpha", type=unit_float, default=None,
                   help="VisConf's score: Z = V C when not given, else Z = V^a C^(1-a) with a in [0, 1]")
    p.add_argument("--target", default=DEFAULT_TARGET,
                   help="the evaluated method compared with every other by the bootstrap; when the default "
                        "is not among --methods, no intervals are computed (a note says so)")
    p.add_argument("--bootstrap", type=nonnegative_int, default=2000,
                   help="bootstrap replicates (0: no confidence intervals)")
    p.add_argument("--out", default="outputs/bon_report.json", metavar="FILE.json",
                   help="the report, a .json file; the plot is written beside it (.png)")
    p.add_argument("--auc", action="store_true",
                   help="also print VisConf's Table 6: the within-question AUROC of every per-rollout score "
                        "for correctness (full pools, mixed-correctness questions, bootstrap interval)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _png(path: str) -> str:
    return os.path.splitext(path)[0] + ".png"


def _check_options(parser: CommandParser, args: argparse.Namespace, cfg: BoNConfig,
                   target_given: bool) -> list[PlannedMethod]:
    """What argparse cannot check alone: duplicates, the method names, the target, the output paths.
    Returns the planned report entries."""
    refuse_duplicates(parser, "--n", args.n)
    refuse_duplicates(parser, "--borda-p", args.borda_p)
    try:
        plan = expand_methods(args.methods, cfg)
    except UserError as e:
        parser.error(f"argument --methods: {e}")
    entries = [p.report for p in plan]
    refuse_duplicates(parser, "--methods", entries)
    if target_given and args.target not in entries:
        parser.error(f"argument --target: {args.target!r} is not among the evaluated methods "
                     f"({', '.join(entries)})")
    if not args.out.endswith(".json"):
        parser.error(f"argument --out: the report is a .json file, got {args.out!r}")
    if os.path.isdir(args.out):
        parser.error(f"argument --out: {args.out!r} is a directory")
    outputs = (args.out, _png(args.out), partial_path(args.out), _png(partial_path(args.out)))
    for i, pool in enumerate(args.pool):
        if any(same_file(pool, path) for path in outputs):
            parser.error(f"argument --out: {args.out!r} (or its plot) would overwrite the pool {pool!r}")
        if any(same_file(pool, other) for other in args.pool[:i]):
            parser.error(f"argument --pool: {pool!r} is given twice")
    return plan


def _check_budgets(pool, plan: list[PlannedMethod], ns, source: str) -> None:
    """The N <= pool size rule, named after the flag (``evaluate_pool`` checks it again)."""
    r0 = pool.num_rollouts_in_view(0)
    r1 = pool.num_rollouts_in_view(1) if pool.has_reframed else 0
    two_view = [p.report for p in plan if p.method.needs_views]
    for n in ns:
        if n > r0:
            raise UserError(f"argument --n: N={n} exceeds the pool size of {source}: {r0} original-view "
                            f"rollouts per question (N <= pool size)")
        if two_view and r1 and n > r1:
            raise UserError(f"argument --n: N={n} exceeds the {r1} reframed-view rollouts per question of "
                            f"{source}, which {', '.join(two_view)} need (N <= pool size per view)")


def _target(args: argparse.Namespace, plan: list[PlannedMethod]) -> str | None:
    """The bootstrap target: ``--target`` (checked to be evaluated when given), ``None`` without bootstrap
    or when the default target is not evaluated (a note on stderr says so)."""
    if args.bootstrap == 0:
        return None
    if args.target in {p.report for p in plan}:
        return args.target
    print(f"ttrl bon: note: the default bootstrap target {DEFAULT_TARGET} is not among --methods, so no "
          "confidence intervals; choose one with --target", file=sys.stderr)
    return None


def bon_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = BoNConfig(ns=tuple(args.n), subsets=args.subsets, seed=args.seed, borda_p=tuple(args.borda_p),
                    lookback_alpha=args.lookback_alpha, lookback_lambda=args.lookback_lambda,
                    visconf_alpha=args.visconf_alpha)
    plan = _check_options(parser, args, cfg, given(argv, "--target"))
    target = _target(args, plan)
    from ..data.pool import load_pool

    t0 = time.perf_counter()
    pools = {}
    for path in args.pool:
        pools[path] = load_pool(path)
        _check_budgets(pools[path], plan, cfg.ns, path)
    t_load = time.perf_counter() - t0
    t1 = time.perf_counter()
    results = {}
    for path, pool in pools.items():
        results[path] = evaluate_pool(pool, args.methods, cfg, progress=not args.no_progress)
        if not results[path].complete:
            break
    t_eval = time.perf_counter() - t1
    num_questions = sum(p.num_questions for p in pools.values())
    meta = {"pool": " ".join(os.path.basename(p) for p in args.pool), "questions": num_questions,
            "load_seconds": round(t_load, 3), "eval_seconds": round(t_eval, 3)}
    if len(pools) == 1:
        result = results[args.pool[0]]
        report = build_report(result, target, replicates=max(1, args.bootstrap), seed=args.seed, meta=meta)
    else:
        from ..eval.bon.benchmarks import macro_report

        report = macro_report(results, target, replicates=max(1, args.bootstrap), seed=args.seed, meta=meta)
    complete = len(results) == len(pools) and all(r.complete for r in results.values())
    report["complete"] = complete
    evaluated = sum(r.num_questions for r in results.values())
    without_gold = sum(len(r.without_gold) for r in results.values())
    graded = num_questions - without_gold
    auc_text = None
    if args.auc and complete:
        from ..eval.bon.auc import auc_table, format_auc_table

        report["auc"] = auc_table(list(pools.values()), replicates=args.bootstrap, seed=args.seed,
                                  lookback_alpha=args.lookback_alpha, lookback_lambda=args.lookback_lambda)
        auc_text = format_auc_table(report["auc"])
    out = args.out if complete else partial_path(args.out)
    png = _png(out)
    write_report(report, out)
    macro = " (macro average)" if len(pools) > 1 else ""
    plot_accuracy(report, png, title=f"Best-of-N on {meta['pool']} ({evaluated} questions){macro}")
    if len(pools) > 1:
        for path, sub in report["per_pool"].items():
            print(f"{path}:\n{format_table(sub)}\n")
        print(f"macro average over {len(report['meta']['macro_average_over'])} pools (bootstrap stratified "
              f"within each pool):")
    print(format_table(report))
    if auc_text:
        print("\n" + auc_text)
    skipped = f" ({without_gold:,} without a gold answer left out)" if without_gold else ""
    if complete:
        print(f"\n{evaluated:,} questions{skipped} evaluated in {t_eval:.1f} s; report: {out}; plot: {png}")
        return 0
    kept = f"; the report at {args.out} was left as it was" if os.path.exists(args.out) else ""
    said, code = interrupt_exit(next((r.interrupted_by for r in results.values() if not r.complete), None))
    print(f"\n{said}: {evaluated:,} of {graded:,} questions{skipped} evaluated in "
          f"{t_eval:.1f} s; partial report: {out}; plot: {png}{kept}")
    return code

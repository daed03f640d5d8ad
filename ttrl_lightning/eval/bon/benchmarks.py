"""Several pools, one per benchmark: macro-averaged accuracy and a bootstrap stratified within benchmark
(VisConf App. B.2: "We resample the questions with replacement within each benchmark ... Method differences
are computed before aggregation and macro-averaged across the ... combinations").

For pools ``b = 1..B`` with per-question accuracies ``a_t[b, q]`` (target) and ``a_c[b, q]`` (comparator), the
statistic is ``D = (1/B) sum_b mean_q (a_t[b, q] - a_c[b, q])``; each replicate resamples the questions of
every pool with replacement within that pool (the same draw for both methods: paired) and recomputes ``D``.
With one pool this is :func:`~.bootstrap.paired_bootstrap`, draw for draw. The resampling itself,
:func:`stratified_bootstrap_means`, also serves ``ttrl bon --auc``'s interval (:mod:`.auc`), where every
question rather than every pool weighs the same.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ttrl_lightning.eval.bon.protocol import BoNResult
from ttrl_lightning.eval.bon.report import build_report

__all__ = ["stratified_bootstrap_means", "percentile_interval", "stratified_paired_bootstrap", "macro_report"]


def stratified_bootstrap_means(strata: Sequence[Tensor], replicates: int, seed: int = 0,
                               macro: bool = True) -> Tensor:
    """``[replicates]`` bootstrap replicates of the mean of ``strata`` (1-D float tensors), every stratum
    resampled with replacement within itself (the block draws of :func:`~.bootstrap.paired_bootstrap`,
    stratum after stratum, from one generator seeded with ``seed``).

    ``macro``: the mean of the strata's means, each stratum weighing the same (VisConf App. B.2's average over
    benchmarks; every stratum must be non-empty); else the mean over all items pooled, each item weighing the
    same (Table 6's question-macro AUC over benchmarks; empty strata add nothing)."""
    sizes = [x.numel() for x in strata]
    total = sum(sizes)
    if replicates < 1 or total == 0 or (macro and 0 in sizes):
        raise ValueError(f"need replicates >= 1 and non-empty strata, got {replicates} replicates of strata "
                         f"of sizes {sizes}")
    gen = torch.Generator().manual_seed(seed)
    means = torch.zeros(replicates, dtype=torch.float64)
    for x, size in zip(strata, sizes):
        if size == 0:
            continue
        x = torch.as_tensor(x, dtype=torch.float64)
        weight = 1.0 / len(strata) if macro else size / total
        block = max(1, 2_000_000 // size)
        for start in range(0, replicates, block):
            stop = min(replicates, start + block)
            idx = torch.randint(0, size, (stop - start, size), generator=gen)
            means[start:stop] += x[idx].mean(-1) * weight
    return means


def percentile_interval(replicates: Tensor, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval ``(lo, hi)`` of bootstrap replicates at ``level``."""
    alpha = (1.0 - level) / 2.0
    lo, hi = torch.quantile(replicates, torch.tensor([alpha, 1.0 - alpha], dtype=torch.float64)).tolist()
    return lo, hi


def stratified_paired_bootstrap(targets: Sequence[Tensor], comparators: Sequence[Tensor],
                                replicates: int = 2000, level: float = 0.95,
                                seed: int = 0) -> dict[str, float]:
    """Macro-averaged paired difference and its percentile interval (module docstring): ``{diff, lo, hi}``.

    targets / comparators: one ``[Q_b]`` tensor per pool (the same questions, in the same order)."""
    if len(targets) != len(comparators) or not targets:
        raise ValueError(f"need one target and one comparator tensor per pool, got {len(targets)} and "
                         f"{len(comparators)}")
    if replicates < 1 or not 0 < level < 1:
        raise ValueError("replicates must be >= 1 and level in (0, 1)")
    diffs = []
    for b, (t, c) in enumerate(zip(targets, comparators)):
        t, c = torch.as_tensor(t, dtype=torch.float64), torch.as_tensor(c, dtype=torch.float64)
        if t.shape != c.shape or t.dim() != 1 or t.numel() == 0:
            raise ValueError(f"pool {b}: need two non-empty [Q] tensors of one shape, got "
                             f"{tuple(t.shape)} and {tuple(c.shape)}")
        if not bool(torch.isfinite(t).all() and torch.isfinite(c).all()):
            raise ValueError(f"pool {b}: per-question accuracies must be finite")
        diffs.append(t - c)
    means = stratified_bootstrap_means(diffs, replicates, seed, macro=True)
    lo, hi = percentile_interval(means, level)
    return {"diff": float(sum(float(d.mean()) for d in diffs) / len(diffs)), "lo": lo, "hi": hi}


def macro_report(results: dict[str, BoNResult], target: str | None, replicates: int = 2000, seed: int = 0,
                 meta: dict | None = None) -> dict:
    """The report of several pools (``name -> BoNResult``): ``report["accuracy"][method][str(N)]`` is the
    macro average over pools (:func:`~.report.build_report`'s shape, so ``format_table`` and the plot read
    it), ``report["per_pool"][name]`` each pool's own report (without bootstrap), and
    ``report["bootstrap"][comparator][str(N) | "overall"]`` the stratified bootstrap of ``target`` minus the
    comparator. Pools with no evaluated question are left out of the averages."""
    per_pool = {name: build_report(r, None, meta={"pool": name}) for name, r in results.items()}
    used = {name: r for name, r in results.items() if r.num_questions > 0}
    methods = next(iter(results.values())).per_question
    acc = {m: {str(n): (sum(per_pool[p]["accuracy"][m][str(n)] for p in used) / len(used) if used else None)
               for n in per_n} for m, per_n in methods.items()}
    first = next(iter(results.values()))
    report = {"accuracy": acc, "complete": all(r.complete for r in results.values()),
              "num_questions": sum(r.num_questions for r in results.values()),
              "questions_without_gold": sum(len(r.without_gold) for r in results.values()),
              "config": {k: (list(v) if isinstance(v, (list, tuple)) else v)
                         for k, v in vars(first.config).items()} if first.config else {},
              "meta": {**(meta or {}), "pools": list(results), "macro_average_over": list(used)},
              "per_pool": per_pool}
    if target is not None and used:
        boot = {}
        for comp in methods:
            if comp in (target, "oracle"):
                continue
            entry = {}
            for n in methods[comp]:
                entry[str(n)] = stratified_paired_bootstrap(
                    [r.per_question[target][n] for r in used.values()],
                    [r.per_question[comp][n] for r in used.values()], replicates, seed=seed)
            entry["overall"] = stratified_paired_bootstrap(
                [torch.stack(list(r.per_question[target].values())).mean(0) for r in used.values()],
                [torch.stack(list(r.per_question[comp].values())).mean(0) for r in used.values()],
                replicates, seed=seed)
            boot[comp] = entry
        report["bootstrap_target"] = target
        report["bootstrap"] = boot
    return report

"""Best-of-N report: VisConf-Table-1-style text table, paired bootstrap CIs, JSON and a plot.

The JSON is strict (no ``NaN`` / ``Infinity`` literals: a method with no evaluated question has ``null``
accuracies) and, like the plot, is written through :mod:`ttrl_lightning.safe_files` (a unique temporary
file renamed into place), so a failed, interrupted or concurrent run never leaves a truncated file.
"""
from __future__ import annotations

import json

import torch

from ttrl_lightning.safe_files import atomic_write, atomic_write_path
from ttrl_lightning.eval.bon.protocol import BoNResult
from ttrl_lightning.eval.bon.bootstrap import paired_bootstrap

__all__ = ["build_report", "format_table", "plot_accuracy", "write_report"]


def build_report(result: BoNResult, target: str | None, replicates: int = 2000, seed: int = 0,
                 meta: dict | None = None) -> dict:
    """JSON-ready report: ``report["accuracy"][method][str(N)]`` (fractions in [0, 1]), and, for the
    ``target`` method, ``report["bootstrap"][comparator][str(N) | "overall"] = {diff, lo, hi}``.

    ``overall`` pairs per-question accuracies averaged over the budgets (VisConf Table 5's overall).
    ``num_questions`` counts the questions evaluated; ``questions_without_gold`` those left out for want of a
    gold answer. With no evaluated question (interrupted at once) every accuracy is ``None``.
    """
    if result.num_questions > 0:
        acc = result.accuracy()
    else:
        acc = {m: {str(n): None for n in per_n} for m, per_n in result.per_question.items()}
    report = {"accuracy": acc, "complete": result.complete, "num_questions": result.num_questions,
              "questions_without_gold": len(result.without_gold),
              "config": {k: (list(v) if isinstance(v, (list, tuple)) else v)
                         for k, v in vars(result.config).items()} if result.config else {},
              "meta": meta or {}}
    if target is not None and result.num_questions > 0:
        if target not in result.per_question:
            raise ValueError(f"bootstrap target {target!r} is not among the evaluated methods {sorted(acc)}")
        boot = {}
        t = result.per_question[target]
        for comp, per_n in result.per_question.items():
            if comp in (target, "oracle"):
                continue
            entry = {str(n): paired_bootstrap(t[n], per_n[n], replicates, seed=seed) for n in per_n}
            entry["overall"] = paired_bootstrap(torch.stack(list(t.values())).mean(0),
                                                torch.stack(list(per_n.values())).mean(0), replicates,
                                                seed=seed)
            boot[comp] = entry
        report["bootstrap_target"] = target
        report["bootstrap"] = boot
    return report


def format_table(report: dict) -> str:
    """Accuracy (%) per method and budget, with the average, and paired CIs against the target."""
    acc = report["accuracy"]
    ns = sorted({int(n) for per_n in acc.values() for n in per_n})
    target = report.get("bootstrap_target")
    head = f"{'method':<28}" + "".join(f"{'N=' + str(n):>9}" for n in ns) + f"{'Avg.':>9}"
    if target:
        head += f"   {'vs ' + target + ' (pp, 95% CI)':<34}"
    lines = [head, "-" * len(head)]
    for m, per_n in acc.items():
        vals = [per_n.get(str(n)) for n in ns]
        row = f"{m:<28}" + "".join(f"{100 * v:>9.2f}" if v is not None else f"{'':>9}" for v in vals)
        present = [v for v in vals if v is not None]
        row += f"{100 * sum(present) / len(present):>9.2f}" if present else f"{'':>9}"
        b = report.get("bootstrap", {}).get(m, {}).get("overall")
        if b:
            row += f"   {100 * b['diff']:+6.2f} [{100 * b['lo']:+.2f}, {100 * b['hi']:+.2f}]"
        lines.append(row)
    if target:
        lines.append(f"(last column: {target} minus the method, percentage points, paired question-cluster "
                     f"bootstrap over all budgets; positive = {target} better)")
    if not report.get("complete", True):
        lines.append(f"INTERRUPTED: only the first {report['num_questions']} questions were evaluated")
    return "\n".join(lines)


def plot_accuracy(report: dict, path: str, title: str = "Best-of-N accuracy") -> None:
    """Accuracy (%) against N per method (log2 x-axis), saved as PNG through
    :func:`~ttrl_lightning.safe_files.atomic_write_path` (methods without numbers are left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.5))
    colours = plt.get_cmap("tab20").colors
    markers = "osD^vP*Xh<>p"
    for i, (m, per_n) in enumerate(report["accuracy"].items()):
        ns = sorted(int(n) for n, v in per_n.items() if v is not None)
        if not ns:
            continue
        style = "--" if m in ("first", "oracle") else "-"
        ax.plot(ns, [100 * per_n[str(n)] for n in ns], style, marker=markers[i % len(markers)],
                color=colours[i % len(colours)], label=m)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (rollouts per question)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    try:  # the figure is freed even if the write fails
        with atomic_write_path(path) as tmp:
            fig.savefig(tmp, dpi=120, format="png")
    finally:
        plt.close(fig)


def write_report(report: dict, path: str) -> None:
    """Write ``report`` as strict JSON (``NaN`` / ``inf`` raise ``ValueError`` before anything is replaced)
    through :func:`~ttrl_lightning.safe_files.atomic_write`."""
    text = json.dumps(report, indent=2, allow_nan=False)
    with atomic_write(path) as fh:
        fh.write(text + "\n")

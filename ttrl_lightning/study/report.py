"""A study's report from its record: per arm, the start and the end on the report's split with the paired
intervals of ``study.stats`` against the start and each control, Holm-adjusted across the label-free arms, and
the share of the gold gain recovered; the runs' own metrics beside them; a plot of the validation curves.

A replicate is one (start seed, run seed) pair; the start's figure for it is the start evaluated with that run
seed's evaluation seed, so every difference is paired on question and sample seed.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Mapping

import numpy as np

from .spec import StudySpec
from .stats import compare, gold_share, holm, paired_grid

__all__ = ["summarise", "format_report", "plot_curves"]


def _replicate(run: Mapping) -> str:
    return f"{run['start_seed']}/{run['seed']}"


def _accuracies(record: Mapping, spec: StudySpec, split: str) -> tuple[dict[str, dict[str, list[float]]],
                                                                         dict[str, dict[str, list[float]]]]:
    """``(arms, starts)``: per arm ``{replicate: per-question accuracy}`` on ``split``, and per arm the start's
    accuracy for the same replicates (evaluated with each run seed's evaluation seed)."""
    arms: dict[str, dict[str, list[float]]] = {}
    starts: dict[str, dict[str, list[float]]] = {}
    for run in record["runs"].values():
        if run["arm"] not in spec.arms or run["seed"] not in spec.seeds:
            continue
        e = run["eval"].get(split)
        start = record["starts"].get(str(run["start_seed"]), {}).get("eval", {}).get(str(run["eval_seed"]), {})
        if e is None or split not in start:
            continue
        rep = _replicate(run)
        arms.setdefault(run["arm"], {})[rep] = [c / e["k"] for c in e["correct"]]
        starts.setdefault(run["arm"], {})[rep] = [c / start[split]["k"] for c in start[split]["correct"]]
    return arms, starts


def summarise(record: Mapping, spec: StudySpec) -> dict:
    """The report's figures (module docstring) as a JSON-able dict."""
    r = spec.report
    split = r.split
    kw = dict(alpha=r.alpha, n_boot=r.bootstrap, seed=r.bootstrap_seed)
    acc, start_acc = _accuracies(record, spec, split)
    arms = [a for a in spec.arms if a in acc]
    runs_of = {a: [run for run in record["runs"].values() if run["arm"] == a and run["seed"] in spec.seeds]
               for a in arms}
    out: dict = {"split": split, "alpha": r.alpha, "bootstrap": r.bootstrap, "arms": {}, "references": {}}
    grids: dict[str, dict[str, np.ndarray]] = {"start": {}}
    raw: dict[str, dict] = {"start": {}}
    for arm in arms:
        runs = runs_of[arm]
        entry: dict = {"role": spec.arms[arm].role, "labeler": spec.arms[arm].labeler, "n": len(acc[arm]),
                       "replicates": sorted(acc[arm]), "splits": {}}
        for name in spec.evaluation.splits:
            after = [run["eval"][name] for run in runs if name in run["eval"]]
            befores = [record["starts"][str(run["start_seed"])]["eval"][str(run["eval_seed"])][name]
                       for run in runs if name in run["eval"]]
            if after:
                entry["splits"][name] = {
                    "avg_before": statistics.fmean(e["avg"] for e in befores),
                    "avg_after": statistics.fmean(e["avg"] for e in after),
                    "maj_before": statistics.fmean(e["maj"] for e in befores),
                    "maj_after": statistics.fmean(e["maj"] for e in after),
                    "avg_per_replicate": {_replicate(run): run["eval"][name]["avg"] for run in runs}}
        for key in ("label_accuracy", "kl_p95", "accepted_per_1k"):
            vals = [run["metrics"].get(key) for run in runs if run["metrics"].get(key) is not None]
            entry[key] = statistics.fmean(vals) if vals else None
        counts: dict[str, int] = {}
        for run in runs:
            for k, v in run["metrics"].get("label_vs_majority", {}).items():
                counts[k] = counts.get(k, 0) + v
        entry["label_vs_majority"] = counts
        entry["minutes"] = [round(run["seconds"] / 60, 1) for run in runs]
        grid, _ = paired_grid(acc[arm], start_acc[arm])
        grids["start"][arm] = grid
        raw["start"][arm] = compare(grid, **kw) if grid.shape[0] > 1 else None
        out["arms"][arm] = entry
    for control in r.controls:
        if control not in acc:
            continue
        grids[control], raw[control] = {}, {}
        for arm in arms:
            if arm == control:
                continue
            try:
                grid, _ = paired_grid(acc[arm], acc[control])
            except ValueError:
                continue
            grids[control][arm], raw[control][arm] = grid, compare(grid, **kw)
    for ref, comparisons in raw.items():
        family = {a: c for a, c in comparisons.items() if c is not None and spec.arms[a].role == "label_free"}
        adjusted = holm(family, {a: grids[ref][a] for a in family}, **kw)
        out["references"][ref] = {a: (adjusted.get(a) or c).as_dict() for a, c in comparisons.items()
                                  if c is not None}
    starts = {}
    for seed, start in record["starts"].items():
        evals = [e[split]["avg"] for key, e in start.get("eval", {}).items()
                 if split in e and int(key) - spec.evaluation.seed_offset in spec.seeds]
        if evals and int(seed) in spec.start.seeds:
            starts[seed] = statistics.fmean(evals)
    out["starts"] = starts
    if r.gold in acc:
        for arm in arms:
            if arm == r.gold:
                continue
            shared = [rep for rep in acc[arm] if rep in acc[r.gold]]
            if not shared:
                continue
            a_gain = np.stack([np.subtract(acc[arm][rep], start_acc[arm][rep]) for rep in shared], axis=1)
            g_gain = np.stack([np.subtract(acc[r.gold][rep], start_acc[r.gold][rep]) for rep in shared], axis=1)
            out["arms"][arm]["gold_share"] = gold_share(a_gain, g_gain, **kw)
    return out


def _pct(v) -> str:
    return "  n/a" if v is None else f"{100 * v:5.1f}"


def _interval(c: Mapping | None) -> str:
    if not c:
        return "n/a"
    return f"{100 * c['mean']:+.1f} [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}]"


def format_report(summary: Mapping, spec: StudySpec, k: int) -> str:
    """The printed tables: the runs' table (before -> after, the run metrics) and the comparisons table."""
    split = summary["split"]
    arms = summary["arms"]
    names = {a: display_name(spec, a) for a in arms}
    w = max([13] + [len(n) for n in names.values()])
    head = (f"{'arm':<{w}} {'n':>2} {f'avg@{k} before -> after':>22} {f'maj@{k} before -> after':>22} "
            f"{'label acc':>9} {'KL P95':>7} {'acc/1K':>7} {'recovered/lost':>15}")
    lines = ([spec.description] if spec.description else []) + [f"{spec.name}: {split} split; intervals: {1 - summary['alpha']:.0%} paired bootstrap over questions then seeds "
             f"({summary['bootstrap']} replicates); n: replicates (start seed x run seed)", head, "-" * len(head)]
    for arm, e in arms.items():
        s = e["splits"].get(split, {})
        lvm = e["label_vs_majority"]
        kl = "n/a" if e["kl_p95"] is None else f"{e['kl_p95']:.3f}"
        acc1k = "n/a" if e["accepted_per_1k"] is None else f"{round(e['accepted_per_1k'])}"
        rl = f"{lvm.get('recovered', 0)}/{lvm.get('lost', 0)}" if lvm else "n/a"
        lines.append(f"{names[arm]:<{w}} {e['n']:>2} {_pct(s.get('avg_before')) + ' -> ' + _pct(s.get('avg_after')):>22} "
                     f"{_pct(s.get('maj_before')) + ' -> ' + _pct(s.get('maj_after')):>22} "
                     f"{_pct(e['label_accuracy']):>9} {kl:>7} {acc1k:>7} {rl:>15}")
    starts = summary.get("starts") or {}
    if starts:
        values = list(starts.values())
        lines.append(f"start, avg@{k} on {split} by start seed (mean over evaluation seeds): "
                     + ", ".join(f"{seed}: {100 * v:.1f}" for seed, v in starts.items())
                     + (f"; spread (max - min) {100 * (max(values) - min(values)):.1f}" if len(values) > 1 else ""))
    refs = summary["references"]
    lines += ["", f"differences in avg@{k} (points) with 95% intervals; Holm p and 'improves' (Holm p < alpha and "
                  "the simultaneous interval above 0) across the label-free arms"]
    head = f"{'arm':<{w}} {'vs':<14} {'difference [95% CI]':>24} {'simultaneous CI':>17} {'p':>7} {'Holm p':>7} improves"
    lines += [head, "-" * len(head)]
    for ref, comparisons in refs.items():
        for arm, c in comparisons.items():
            simultaneous = "" if c.get("adjusted_low") is None else \
                f"[{100 * c['adjusted_low']:+.1f}, {100 * c['adjusted_high']:+.1f}]"
            holm_p = "" if c.get("p_adjusted") is None else f"{c['p_adjusted']:.4f}"
            improves = {True: "yes", False: "no", None: "-"}[c.get("improves")]
            lines.append(f"{names[arm]:<{w}} {ref:<14} {_interval(c):>24} {simultaneous:>17} {c['p']:7.4f} {holm_p:>7} "
                         f"{improves}")
    shares = {a: e.get("gold_share") for a, e in arms.items() if "gold_share" in e}
    if shares:
        lines += ["", f"share of the gold gain recovered, (arm - start) / ({spec.report.gold} - start), 95% CI:"]
        for arm, g in shares.items():
            lines.append(f"  {names[arm]:<{w}} " + ("undefined (the gold gain's interval reaches 0)" if g is None else
                                             f"{g['share']:+.2f} [{g['low']:+.2f}, {g['high']:+.2f}]"))
    other = [s for s in spec.evaluation.splits if s != split]
    if other:
        lines += ["", "other evaluated splits, avg@k before -> after (mean over replicates):"]
        for arm, e in arms.items():
            cells = "  ".join(f"{s} {_pct(e['splits'][s]['avg_before'])} -> {_pct(e['splits'][s]['avg_after'])}"
                              for s in other if s in e["splits"])
            lines.append(f"  {names[arm]:<{w}} {cells}")
    return "\n".join(lines)


def plot_curves(record: Mapping, spec: StudySpec, path: str) -> bool:
    """Two panels over TTRL steps, one line per arm (the mean over its runs): the validation curve
    (``val/avg@k``) and the token-KL P95 to the reference (``train/kl_p95``, with the PID controller's corridor);
    False when no run logged either."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..safe_files import atomic_write_path

    panels = (("val/avg@", 100, "validation avg@k (%)"), ("train/kl_p95", 1, "token KL to the reference, P95"))
    curves: dict[str, dict[str, dict[int, list[float]]]] = {}
    for run in record["runs"].values():
        if run["arm"] not in spec.arms:
            continue
        for key, points in run.get("curves", {}).items():
            for prefix, scale, _ in panels:
                if key.startswith(prefix):
                    by_step = curves.setdefault(prefix, {}).setdefault(run["arm"], {})
                    for step, value in points:
                        by_step.setdefault(int(step), []).append(scale * value)
    if not curves:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, (prefix, _, ylabel) in zip(axes, panels):
        for i, arm in enumerate(spec.arms):
            by_step = curves.get(prefix, {}).get(arm)
            if not by_step:
                continue
            steps = sorted(by_step)
            n = max(len(v) for v in by_step.values())
            ax.plot(steps, [statistics.fmean(by_step[s]) for s in steps], marker=".", color=f"C{i % 10}",
                    label=f"{display_name(spec, arm)} ({n} run{'s' if n > 1 else ''})",
                    linestyle="-" if n > 1 else "--")
        if prefix == "train/kl_p95":
            ax.axhspan(0.10, 0.20, color="0.9", label="PID corridor (Pixelis)")
        ax.set_xlabel("TTRL step")
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"{spec.name}: mean over each arm's runs", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with atomic_write_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return True


#: what a labeler lacks on text questions: its defining image signal (VisConf's V; Pixelis' VisFid)
TEXT_ONLY_CAVEATS = {"visconf": "C only, no V", "pixel": "no VisFid"}


def display_name(spec: StudySpec, arm: str) -> str:
    """The arm's name as the tables print it: with what its labeler runs without where the study's questions have
    no images ("visconf (C only, no V)": on a text model VisConf's Z = V x C is C alone)."""
    caveat = TEXT_ONLY_CAVEATS.get(spec.arms[arm].labeler) if spec.questions.kind != "scenes" else None
    return f"{arm} ({caveat})" if caveat else arm

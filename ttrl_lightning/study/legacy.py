"""A reader for the record of the first SmolLM2 curriculum study (``real_model_ttrl.json``, written by the
benchmark that ran it before ``ttrl study`` existed), kept so that the committed record stays readable.

That record holds per-run means only (avg@k / maj@k per split, no per-question counts), so the paired bootstrap of
``study.stats`` cannot be computed from it. The reader prints the study's table as it was reported (per arm, the
mean over seeds of each split's avg@k with its gain over the checkpoint and the seeds' spread max - min, held-out
maj@k, label accuracy and minutes per run) and, beside it, the only intervals its numbers allow: a t interval over
seeds of the held-out gain against the checkpoint (one checkpoint draw: it ignores the checkpoint's own sampling
noise) and a seed-paired t interval against the random-reward control. ``ttrl study --report-only`` uses it when
the spec's folder holds this record and no ``study.json``.
"""
from __future__ import annotations

import json
import os
import statistics

__all__ = ["LEGACY_NAME", "legacy_report"]

#: the file name of such a record
LEGACY_NAME = "real_model_ttrl.json"
def _label_accuracy(run: dict) -> float | None:
    """The run's mean label accuracy over the steps that labelled a question (a step labelling none repeated the
    step before's value in that record's log; dropped, as the benchmark that wrote it did)."""
    curves = run.get("curves", {})
    unlabelled = {step for step, v in curves.get("train/coverage", []) if v == 0}
    points = [v for step, v in curves.get("train/label_accuracy", []) if step not in unlabelled]
    return statistics.fmean(points) if points else None


def _t_interval(values: list[float]) -> tuple[float, float] | None:
    from scipy import stats

    if len(values) < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = stats.t.ppf(0.975, len(values) - 1) * sd / len(values) ** 0.5
    return mean - half, mean + half


def legacy_report(path: str, arms: list[str] | None = None) -> str:
    """The table of the legacy record at ``path`` (module docstring); ``arms``: their order (default: the
    record's)."""
    from .record import RecordError

    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
        runs = record["runs"].values()
        for run in runs:  # the fields the table reads, checked before anything is printed
            run["arm"], run["seed"], run["task"], run["after"]["held_out"], run["seconds"]
        record["tasks"], record["before"], record["settings"]["k"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise RecordError(f"{path}: not a readable record of the first curriculum study ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None
    lines = []
    for task in record["tasks"]:
        before = record["before"][task]
        runs = [r for r in record["runs"].values() if r["task"] == task]
        order = arms or list(dict.fromkeys(r["arm"] for r in runs))
        by_arm = {a: sorted((r for r in runs if r["arm"] == a), key=lambda r: r["seed"]) for a in order}
        k = record["settings"]["k"]
        splits = list(before)
        head = (f"{'arm':<28} {'n':>2}" + "".join(f" {s + f' avg@{k} (gain, spread)':>34}" for s in splits)
                + f" {'held-out maj':>12} {'label acc':>9}  min per run")
        lines += [f"{os.path.basename(path)}, {task}: means over each arm's seeds (per-run means only: no "
                  f"per-question counts)", head, "-" * len(head)]
        lines.append(f"{'checkpoint':<28}   " + "".join(f" {100 * before[s]['avg']:34.1f}" for s in splits)
                     + f" {100 * before['held_out']['maj']:12.1f}")
        for arm, rs in by_arm.items():
            if not rs:
                continue
            row = f"{arm:<28} {len(rs):>2}"
            for s in splits:
                values = [r["after"][s]["avg"] for r in rs]
                mean = statistics.fmean(values)
                spread = f"{100 * (max(values) - min(values)):.1f}" if len(values) > 1 else "-"
                cell = f"{100 * mean:.1f} ({100 * (mean - before[s]['avg']):+.1f}, {spread})"
                row += f" {cell:>34}"
            maj = statistics.fmean(r["after"]["held_out"]["maj"] for r in rs)
            labels = [x for x in (_label_accuracy(r) for r in rs) if x is not None]
            label = f"{100 * statistics.fmean(labels):.1f}" if labels and arm not in ("random_reward", "gold_reward") \
                else ""
            minutes = ", ".join(f"{r['seconds'] / 60:.1f}" for r in rs)
            lines.append(row + f" {100 * maj:12.1f} {label:>9}  {minutes}")
        random = {r["seed"]: r["after"]["held_out"]["avg"] for r in by_arm.get("random_reward", [])}
        lines += ["", "held-out avg@k differences with the intervals these per-run means allow (95%, t over seeds):"]
        for arm, rs in by_arm.items():
            if arm == "random_reward" or len(rs) < 2:
                continue
            gains = [r["after"]["held_out"]["avg"] - before["held_out"]["avg"] for r in rs]
            vs_ck = _t_interval(gains)
            paired = [r["after"]["held_out"]["avg"] - random[r["seed"]] for r in rs if r["seed"] in random]
            vs_rand = _t_interval(paired)
            cell = lambda m, ci: f"{100 * m:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"  # noqa: E731
            lines.append(f"  {arm:<28} vs checkpoint {cell(statistics.fmean(gains), vs_ck)}"
                         + (f"; vs random (seed-paired) {cell(statistics.fmean(paired), vs_rand)}" if vs_rand else ""))
    return "\n".join(lines)

"""``ttrl study``: run an experiment declared in a config file and print its verdict with confidence intervals.

    ttrl study --config configs/study/demo.yaml                 # a new study (refused where a record exists)
    ttrl study --config configs/study/demo.yaml --resume        # continue it: finished runs are kept
    ttrl study --config configs/study/demo.yaml --restart       # move the old record aside, start again
    ttrl study --config configs/study/demo.yaml --report-only   # the tables of the runs so far
    ttrl study --config configs/study/demo.yaml --resume --only majority/0 --only pixel

The spec (``ttrl_lightning.study.spec``) names the start, the question splits, the TTRL config, the arms (a
labeler and config overrides each), the seeds, the evaluation and the comparisons. The record
(``<out>/study.json``) holds per-question counts of every run and of the start; the report gives every arm's
difference from the start and each control with a paired hierarchical bootstrap 95% interval, Holm-adjusted
across the label-free arms, and the share of the gold gain recovered (``<out>/report.json``,
``<out>/study.png``). A spec with ``numerics: portable`` runs under the demo's pinned float kernels
(``cli.numerics``).
"""
from __future__ import annotations

import argparse
import json
import os

__all__ = ["study_main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ttrl study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a study spec: a YAML file, or a packaged name (study/demo.yaml)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the record in the spec's out folder")
    mode.add_argument("--restart", action="store_true",
                      help="move an existing record aside (study.<time>.json, never deleted) and start again")
    mode.add_argument("--report-only", action="store_true", help="print the report of the record; run nothing")
    p.add_argument("--only", action="append", default=None, metavar="ARM[/SEED]",
                   help="run only this arm (and seed); repeatable")
    p.add_argument("--out", default=None, help="instead of the spec's out folder")
    return p


def study_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from dataclasses import replace

    from ..study.spec import load_spec

    spec = load_spec(args.config)
    if args.out:
        spec = replace(spec, out=args.out)
    if spec.numerics == "portable" and not args.report_only:
        from .numerics import is_portable, run_portable

        if not is_portable():
            return run_portable(["study", *argv])
    from ..study.record import RECORD_NAME, StudyRecord

    if args.report_only and not os.path.exists(os.path.join(spec.out, RECORD_NAME)):
        from ..study.legacy import LEGACY_NAME, legacy_report

        legacy = os.path.join(spec.out, LEGACY_NAME)
        if os.path.exists(legacy):  # a record written before `ttrl study` (per-run means only)
            print(legacy_report(legacy, list(spec.arms) + _legacy_arms(legacy, spec)))
            return 0
    record = StudyRecord.open(spec, resume=args.resume, restart=args.restart, read_only=args.report_only)
    if not args.report_only:
        from ..study.runner import run_study

        if spec.numerics == "portable":
            from .numerics import numerics_report

            record.data.setdefault("numerics", numerics_report())
        run_study(spec, record, args.only)
    return report(spec, record)


def _legacy_arms(path: str, spec) -> list[str]:
    """The arms of a legacy record that the spec does not name (its screens), in the record's order."""
    with open(path, encoding="utf-8") as fh:
        runs = json.load(fh)["runs"].values()
    return [a for a in dict.fromkeys(r["arm"] for r in runs) if a not in spec.arms]


def report(spec, record) -> int:
    """Print and write the report of ``record`` (``<out>/report.json``, ``<out>/study.png``)."""
    from ..safe_files import atomic_write
    from ..study.report import format_report, plot_curves, summarise

    if not record.data["runs"]:
        print(f"{record.path}: no finished run yet")
        return 0
    summary = summarise(record.data, spec)
    print("\n" + format_report(summary, spec, spec.evaluation.k))
    path = os.path.join(spec.out, "report.json")
    with atomic_write(path) as fh:
        json.dump(summary, fh, indent=1, allow_nan=False)
        fh.write("\n")
    plot = os.path.join(spec.out, "study.png")
    drawn = plot_curves(record.data, spec, plot)
    print(f"\nrecord: {record.path}; report: {path}" + (f"; plot: {plot}" if drawn else ""))
    return 0

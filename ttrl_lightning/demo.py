"""``ttrl demo``: the README's main job on the embedded default, on CPU.

It simulates a synthetic rollout pool (``ttrl pool simulate``: 600 questions x 32 rollouts x 2 views,
per-token signals) and runs the VisConf Table-1 best-of-N protocol on it (``ttrl bon``), printing the table
with paired bootstrap intervals and writing the JSON report and the accuracy-vs-N plot.
"""
from __future__ import annotations

import argparse
import os

from .cli import main as ttrl_main


def demo_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ttrl demo", description=__doc__)
    p.add_argument("--out", default="outputs/demo", help="output folder")
    p.add_argument("--questions", type=int, default=600)
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    pool = os.path.join(args.out, "pool.jsonl")
    print("== 1/2  ttrl pool simulate  (a synthetic pool: numbers describe the selection rules, not a model)")
    rc = ttrl_main(["pool", "simulate", "--out", pool, "--questions", str(args.questions), "--seed", "0"])
    if rc:
        return rc
    print("\n== 2/2  ttrl bon  (VisConf Table-1 protocol: N in {8,16,32}, 100 subsets, paired bootstrap)")
    return ttrl_main(["bon", "--pool", pool, "--out", os.path.join(args.out, "bon_report.json")])

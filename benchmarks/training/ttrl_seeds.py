"""The demo's test-time RL over several seeds: mean and spread of the gain per pseudo-labeler.

One SFT checkpoint (seed 0, ``configs/sft/tiny_ttrl.yaml``) and one set of unlabeled, shifted questions; the
TTRL runs (``configs/ttrl/tiny_demo.yaml``) differ only in their seed (rollout sampling, data order). For every
labeler it prints avg@k and maj@k after TTRL (mean and spread over the seeds) beside the SFT model's, the gain
(after - before) and its spread, label accuracy, token-KL P95 (mean of the per-step P95; and the largest per-step
value, to check the corridor's upper edge 0.20) and accepted updates per 1K questions, and says whether the
mean avg@k gain exceeds the seeds' spread (max - min of avg@k after). Writes the figures as JSON.

    python -m benchmarks.training.ttrl_seeds                       # 3 seeds, majority / self_harmony / pixel
    python -m benchmarks.training.ttrl_seeds --labelers majority --seeds 0 1 2 3 4
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys


def main(argv: list[str] | None = None) -> int:
    from ttrl_lightning.cli.demo import DEMO_LABELERS, run_ttrl_demo
    from ttrl_lightning.safe_files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/bench/ttrl_seeds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--labelers", nargs="+", choices=sorted(DEMO_LABELERS), default=list(DEMO_LABELERS))
    p.add_argument("--ttrl-steps", type=int, default=None, help="TTRL steps (default: the demo config's)")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--questions", type=int, default=None)
    p.add_argument("--reuse-sft", action="store_true", help="reuse an SFT run already in --out/seed<first>")
    p.add_argument("--sft-checkpoint", default=None, help="start every seed from this SFT checkpoint")
    args = p.parse_args(argv)

    runs = []
    for i, s in enumerate(args.seeds):
        out = os.path.join(args.out, f"seed{s}")
        os.makedirs(out, exist_ok=True)
        # the first run's SFT checkpoint is shared: only the TTRL seed varies
        report = run_ttrl_demo(out, args.labelers, 0, None, args.ttrl_steps, args.k, args.questions,
                               reuse_sft=i == 0 and args.reuse_sft, ttrl_seed=s,
                               sft_checkpoint=runs[0]["settings"]["sft_checkpoint"] if runs else args.sft_checkpoint)
        runs.append(report)

    before = runs[0]["before"]
    k = args.k
    summary: dict = {"seeds": args.seeds, "k": k, "before": before, "labelers": {}}
    head = (f"{'labeler':<13} {'avg@%d after' % k:>20} {'gain':>16} {'spread':>7} {'maj@%d after' % k:>20} "
            f"{'label acc':>9} {'KL P95':>7} {'KL P95 max':>10} {'acc/1K':>7}  gain > spread")
    print(f"\nSFT model: avg@{k} {100 * before['avg']:.1f}%, maj@{k} {100 * before['maj']:.1f}%  "
          f"({len(args.seeds)} TTRL seeds: {args.seeds})")
    print(head)
    print("-" * len(head))
    for name in args.labelers:
        entries = [r["labelers"][name] for r in runs]
        after = [e["accuracy_after"] for e in entries]
        maj = [e["maj_accuracy_after"] for e in entries]
        gains = [a - before["avg"] for a in after]
        spread = max(after) - min(after)
        sd = statistics.stdev(after) if len(after) > 1 else 0.0
        labels = [e["label_accuracy"] for e in entries if e["label_accuracy"] is not None]
        kl = [e["kl_p95"] for e in entries if e["kl_p95"] is not None]
        kl_max = [e["kl_p95_max"] for e in entries if e["kl_p95_max"] is not None]
        row = {
            "accuracy_after": after, "maj_accuracy_after": maj, "gain_mean": statistics.fmean(gains),
            "spread": spread, "std": sd, "label_accuracy": statistics.fmean(labels) if labels else None,
            "kl_p95": statistics.fmean(kl) if kl else None, "kl_p95_max": max(kl_max) if kl_max else None,
            "accepted_per_1k": statistics.fmean(e["accepted_per_1k"] for e in entries),
            "label_vs_majority": [e["label_vs_majority"] for e in entries],
        }
        row["gain_exceeds_spread"] = row["gain_mean"] > spread
        summary["labelers"][name] = row
        pct = lambda v: f"{100 * v:5.1f}"  # noqa: E731
        print(f"{name:<13} {pct(statistics.fmean(after)) + ' +- ' + pct(sd).strip():>20} "
              f"{('+' if row['gain_mean'] >= 0 else '') + pct(row['gain_mean']).strip() + ' pp':>16} "
              f"{pct(spread):>7} {pct(statistics.fmean(maj)):>20} "
              f"{'n/a' if row['label_accuracy'] is None else pct(row['label_accuracy']):>9} "
              f"{'n/a' if row['kl_p95'] is None else format(row['kl_p95'], '.3f'):>7} "
              f"{'n/a' if row['kl_p95_max'] is None else format(row['kl_p95_max'], '.3f'):>10} "
              f"{round(row['accepted_per_1k']):>7}  {'yes' if row['gain_exceeds_spread'] else 'no'}")
    path = os.path.join(args.out, "ttrl_seeds.json")
    for r in runs:  # the curves are in each seed's report; keep the summary small
        for e in r["labelers"].values():
            e.pop("curves", None)
    summary["runs"] = runs
    with atomic_write(path) as fh:
        json.dump(summary, fh, indent=1, allow_nan=False)
        fh.write("\n")
    print(f"\n{path}")
    return 0


if __name__ == "__main__":
    from ttrl_lightning.cli.numerics import reexec_portable

    reexec_portable()  # the demo's portable numerics (cli.numerics): the same figures on every AVX2 CPU
    sys.exit(main())

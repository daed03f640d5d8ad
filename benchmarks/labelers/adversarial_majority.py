"""Hard-majority vs weighted-with-abstention test-time RL under adversarial votes (Pixelis sec. 4.3).

The demo's setting (``configs/ttrl/tiny_demo.yaml``: the SFT checkpoint of ``configs/sft/tiny_ttrl.yaml``, the
shifted unlabeled split), with the vote perturbation ``flip_answers`` (``ttrl_lightning.modules.perturbations``):
in every question's group of votes a share (default 25%) of the rollouts, drawn at random per group, get their
final answer flipped to ONE shared wrong answer and are re-scored by the policy (teacher-forced replay), so their
entropy and log-probabilities are the model's own for the text they now hold. The same flips (same seed) meet

* ``majority``: TTRL's hard majority vote, every question trained on;
* ``pixel``: Pixelis' uncertainty-weighted vote (exp(-H) x calibrated confidence x Dawid-Skene reliability)
  with abstention (margin below delta, non-singleton conformal set).

It prints, side by side, accuracy after (avg@k and maj@k on the clean questions), label accuracy, token-KL P95
(mean of the per-step P95, and the largest) and accepted updates per 1K questions, for every seed, and whether
the weighted run ends with higher accuracy and lower KL P95 than hard majority; writes the figures as JSON.

    python -m benchmarks.labelers.adversarial_majority                  # 25% flips, seed 0
    python -m benchmarks.labelers.adversarial_majority --share 0.3 --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

LABELERS = ("majority", "pixel")


def main(argv: list[str] | None = None) -> int:
    from ttrl_lightning.cli.demo import run_ttrl_demo
    from ttrl_lightning.safe_files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/bench/adversarial_majority")
    p.add_argument("--share", type=float, default=0.25, help="share of each group's votes flipped")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--ttrl-steps", type=int, default=None)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--questions", type=int, default=None)
    p.add_argument("--sft-checkpoint", default=None, help="start from this SFT checkpoint (default: train one)")
    args = p.parse_args(argv)
    if not 0 < args.share < 1:
        p.error(f"--share must be in (0, 1), got {args.share}")

    flip = ["--model.init_args.perturbation", json.dumps({"name": "flip_answers", "share": args.share})]
    runs = []
    sft = args.sft_checkpoint
    for s in args.seeds:
        report = run_ttrl_demo(os.path.join(args.out, f"seed{s}"), list(LABELERS), 0, None, args.ttrl_steps,
                               args.k, args.questions, reuse_sft=False, ttrl_seed=s,
                               extra_args={name: flip for name in LABELERS}, sft_checkpoint=sft)
        sft = report["settings"]["sft_checkpoint"]
        runs.append(report)

    k = args.k
    before = runs[0]["before"]
    print(f"\n{100 * args.share:.0f}% of each group's votes flipped to one shared wrong answer; SFT model "
          f"avg@{k} {100 * before['avg']:.1f}%, maj@{k} {100 * before['maj']:.1f}% (clean questions)")
    head = (f"{'seed':>4} {'labeler':<9} {'avg@%d after' % k:>12} {'maj@%d after' % k:>12} {'label acc':>9} "
            f"{'KL P95':>7} {'KL P95 max':>10} {'acc/1K':>7}")
    print(head)
    print("-" * len(head))
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}"  # noqa: E731
    num = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    for s, r in zip(args.seeds, runs):
        for name in LABELERS:
            e = r["labelers"][name]
            print(f"{s:>4} {name:<9} {pct(e['accuracy_after']):>12} {pct(e['maj_accuracy_after']):>12} "
                  f"{pct(e['label_accuracy']):>9} {num(e['kl_p95']):>7} {num(e['kl_p95_max']):>10} "
                  f"{round(e['accepted_per_1k']):>7}")
    mean = {name: {f: statistics.fmean(r["labelers"][name][f] for r in runs
                                       if r["labelers"][name][f] is not None) if any(
                       r["labelers"][name][f] is not None for r in runs) else None
                   for f in ("accuracy_after", "kl_p95", "label_accuracy")} for name in LABELERS}
    higher = mean["pixel"]["accuracy_after"] > mean["majority"]["accuracy_after"]
    lower = (mean["pixel"]["kl_p95"] is not None and mean["majority"]["kl_p95"] is not None
             and mean["pixel"]["kl_p95"] < mean["majority"]["kl_p95"])
    print(f"\nmean over seeds: weighted-with-abstention avg@{k} {pct(mean['pixel']['accuracy_after'])}% vs hard "
          f"majority {pct(mean['majority']['accuracy_after'])}% ({'higher' if higher else 'not higher'}); KL P95 "
          f"{num(mean['pixel']['kl_p95'])} vs {num(mean['majority']['kl_p95'])} ({'lower' if lower else 'not lower'})")
    path = os.path.join(args.out, "adversarial_majority.json")
    for r in runs:
        for e in r["labelers"].values():
            e.pop("curves", None)
    with atomic_write(path) as fh:
        json.dump({"share": args.share, "seeds": args.seeds, "mean": mean, "weighted_higher_accuracy": higher,
                   "weighted_lower_kl_p95": lower, "runs": runs}, fh, indent=1, allow_nan=False)
        fh.write("\n")
    print(path)
    return 0


if __name__ == "__main__":
    from ttrl_lightning.cli.numerics import reexec_portable

    reexec_portable()  # the demo's portable numerics (cli.numerics): the same figures on every AVX2 CPU
    sys.exit(main())

"""``ttrl demo``: the README's main job on the embedded default, on CPU (about a minute).

1. ``ttrl fit --config configs/sft/tiny_arith.yaml``: SFT (Pixelis 3.2.1: action-token weighting, feedback
   dropout) of a tiny randomly initialised Qwen2 on generated tool-call arithmetic traces;
2. ``ttrl fit --config configs/rft/tiny_grpo_fast.yaml``: a few GRPO steps with the EMA anchor as KL
   reference and the PID-controlled KL coefficient;
3. ``ttrl pool simulate`` + ``ttrl bon``: a **synthetic** rollout pool (600 questions x 32 rollouts x 2 views,
   per-token signals) evaluated with VisConf's Table-1 protocol (N in {8, 16, 32}, 100 subsets, paired
   bootstrap), writing the JSON report and the accuracy-vs-N plot.
"""
from __future__ import annotations

import argparse
import os

from . import main as ttrl_main
from .configs import config_path

#: (title, packaged config, output subfolder) of the training steps
TRAINING_STEPS = [
    ("SFT of a tiny Qwen2 on generated tool-call arithmetic traces", "sft/tiny_arith.yaml", "sft"),
    ("GRPO steps with EMA anchor (KL reference) and PID-controlled beta", "rft/tiny_grpo_fast.yaml", "grpo"),
]


def demo_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ttrl demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="outputs/demo", help="output folder")
    p.add_argument("--questions", type=int, default=600, help="questions in the simulated pool")
    p.add_argument("--skip-training", action="store_true", help="only the best-of-N part")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    training = [] if args.skip_training else TRAINING_STEPS
    steps = len(training) + 1
    for step, (title, config, subdir) in enumerate(training, start=1):
        if step > 1:
            print()
        print(f"== {step}/{steps}  ttrl fit: {title}")
        rc = ttrl_main(["fit", "--config", config_path(config),
                        "--trainer.default_root_dir", os.path.join(args.out, subdir)])
        if rc:
            return rc
    pool = os.path.join(args.out, "pool.jsonl")
    print(f"\n== {steps}/{steps}  best-of-N on a synthetic pool "
          "(its numbers describe the selection rules, not a model)")
    rc = ttrl_main(["pool", "simulate", "--out", pool, "--questions", str(args.questions), "--seed", "0"])
    if rc:
        return rc
    return ttrl_main(["bon", "--pool", pool, "--out", os.path.join(args.out, "bon_report.json")])

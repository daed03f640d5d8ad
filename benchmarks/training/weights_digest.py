"""The SHA-256 of the policy's weights after a short test-time RL run, for every pseudo-labeler.

A restructure of the training step must leave training bit-identical: run this before and after the change
on the same machine and compare the digests (``--compare`` reads an earlier run's JSON and says, labeler by
labeler, whether the weights are the same bits). The run: ``--steps`` TTRL steps (default 3) from ``--model``
(an SFT checkpoint, e.g. the demo's; a randomly initialised tiny model mostly abstains and moves little) on
the demo's shifted task, M 8 votes, N 4 trained, 64 new tokens (the fused view needs about 60), pixel calibrated on 64 labelled
questions, one thread, no validation, no logger.

    python -m benchmarks.training.weights_digest --model outputs/demo/sft/checkpoints/last.ckpt --out before.json
    python -m benchmarks.training.weights_digest --model outputs/demo/sft/checkpoints/last.ckpt --compare before.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

LABELERS = ("majority", "self_harmony", "visconf", "pixel", "self_certainty", "entropy", "random_reward",
            "gold_reward")
FUSED = "{prompt} reframe:"


def module_options(labeler: str) -> dict:
    """The ``TTRLModule`` options of one run (grouped as the module takes them)."""
    return {"voting": {"labeler": labeler, "num_votes": 8, "num_trained": 4, "answer_extractor": "final_answer",
                       "fused_prompt_template": FUSED},
            "sampling": {"temperature": 1.0, "max_new_tokens": 64}, "grpo": {"kl_coef": 0.01}}


def weights_digest(module) -> str:
    """SHA-256 over the policy's state dict, tensors in name order, as raw bytes."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(module.policy.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()


def run(labeler: str, model: str, steps: int, seed: int) -> str:
    import lightning.pytorch as pl

    from ttrl_lightning.data.questions import QuestionDataModule
    from ttrl_lightning.modules import PolicySpec, TTRLModule

    pl.seed_everything(seed, verbose=False)
    module = TTRLModule(policy=PolicySpec(model=model, lr=2e-5, seed=seed), **module_options(labeler))
    data = QuestionDataModule(task="add2_carry", n=8 * steps, batch_size=8, shuffle=False, n_calibration=64,
                              seed=seed)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, limit_val_batches=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0)
    trainer.fit(module, datamodule=data)
    return weights_digest(module)


def main(argv: list[str] | None = None) -> int:
    import torch

    from ttrl_lightning.safe_files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the starting checkpoint (an SFT run's)")
    p.add_argument("--labelers", nargs="+", choices=LABELERS, default=list(LABELERS))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="outputs/bench/weights_digest.json")
    p.add_argument("--compare", default=None, help="an earlier run's JSON: say which digests match")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    digests = {}
    for name in args.labelers:
        digests[name] = run(name, args.model, args.steps, args.seed)
        print(f"{name:>15} {digests[name]}", flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with atomic_write(args.out) as fh:
        json.dump({"settings": vars(args), "digests": digests}, fh, indent=2)
    if args.compare:
        with open(args.compare) as fh:
            before = json.load(fh)["digests"]
        same = {n: before.get(n) == d for n, d in digests.items()}
        for n, ok in same.items():
            print(f"{n:>15} {'identical' if ok else 'DIFFERENT' if n in before else 'not in ' + args.compare}")
        return 0 if all(same.values()) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

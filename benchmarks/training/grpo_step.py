"""GRPO step throughput: ``GRPOModule`` (Lightning) vs TRL's ``GRPOTrainer``, same inputs, one run.

Both train the same tiny random model (saved to a temporary directory and loaded from there by both), on
the same prompts, with the same N samples per prompt, completion length, temperature, KL coefficient
(reference = frozen initial policy), learning rate and number of optimizer steps, on CPU, no vLLM.
Completion tokens are counted identically for both by a zero-weight reward callable that sees every
rollout's ``completion_ids``. Times exclude model loading: from the start of training to its end.

    python -m benchmarks.training.grpo_step --threads 1 --steps 10 --prompts 4 --n 8 --max-new-tokens 16 --out outputs/grpo_step.json

Prints rollout tokens/s and optimizer steps/s for each and the ratio ours / TRL (target: >= 1).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec


class TokenCounter:
    """A reward of 0 that counts completion tokens and calls (same code path in both trainers)."""

    __name__ = "token_counter"

    def __init__(self):
        self.tokens = 0
        self.calls = 0

    def __call__(self, *, prompts, completions, completion_ids, **_):
        self.tokens += sum(len(c) for c in completion_ids)
        self.calls += 1
        return [0.0] * len(completions)


def make_model_dir(tmp: str, arch: str, seed: int, hidden: int, layers: int) -> str:
    from ttrl_lightning.models import build_char_tokenizer, load_model

    tok = build_char_tokenizer()
    model = load_model(f"tiny:{arch}", tok, seed=seed, tiny_kwargs={"hidden": hidden, "layers": layers})
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return tmp


def run_ours(model_dir, prompts, args) -> dict:
    import lightning.pytorch as pl

    from ttrl_lightning.data.datamodules import PromptDataModule
    from ttrl_lightning.modules import GRPOModule, PolicySpec
    from ttrl_lightning.rewards.simple import ExactAnswer

    counter = TokenCounter()
    pl.seed_everything(args.seed)
    module = GRPOModule(policy=PolicySpec(model=model_dir, lr=args.lr, seed=args.seed), num_generations=args.n,
                        rewards=[ExactAnswer(), counter], reward_weights=[1.0, 0.0],
                        sampling=SamplingSpec(max_new_tokens=args.max_new_tokens, temperature=1.0),
                        grpo=GRPOSpec(kl_coef=args.beta, reference="initial", loss_aggregation="token_mean",
                                      max_grad_norm=1.0))
    data = PromptDataModule(task="arith", n_train=len(prompts), batch_size=args.prompts, seed=args.seed)
    times = {}

    class Clock(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            times["start"] = time.perf_counter()

        def on_train_end(self, trainer, pl_module):
            times["end"] = time.perf_counter()

    trainer = pl.Trainer(accelerator="cpu", max_steps=args.steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, callbacks=[Clock()])
    trainer.fit(module, data)
    return {"seconds": times["end"] - times["start"], "steps": trainer.global_step, "tokens": counter.tokens,
            "reward_calls": counter.calls}


def run_trl(model_dir, prompts, args) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ttrl_lightning.rewards.simple import ExactAnswer

    counter = TokenCounter()
    exact = ExactAnswer()
    exact.__name__ = "exact_answer"
    times = {}

    class Clock(TrainerCallback):
        def on_train_begin(self, a, state, control, **kw):
            times["start"] = time.perf_counter()

        def on_train_end(self, a, state, control, **kw):
            times["end"] = time.perf_counter()

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_grpo_"), use_cpu=True, report_to=[], save_strategy="no",
        logging_steps=1, max_steps=args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
        per_device_train_batch_size=args.prompts * args.n, num_generations=args.n,
        max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, beta=args.beta,
        loss_type="dapo", num_iterations=1, max_grad_norm=1.0, seed=args.seed, shuffle_dataset=False,
        reward_weights=[1.0, 0.0], optim="adamw_torch", bf16=False, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    ds = Dataset.from_list(prompts)
    trainer = GRPOTrainer(model=model, reward_funcs=[exact, counter], args=cfg, train_dataset=ds,
                          processing_class=tok, callbacks=[Clock()])
    trainer.train()
    return {"seconds": times["end"] - times["start"], "steps": trainer.state.global_step, "tokens": counter.tokens,
            "reward_calls": counter.calls}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--prompts", type=int, default=4, help="prompts per optimizer step")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--arch", default="qwen2")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: on a shared CPU more threads mostly measure contention; "
                        "0 keeps torch's default)")
    p.add_argument("--order", choices=["ours-first", "trl-first"], default="trl-first")
    p.add_argument("--out", default="outputs/grpo_step.json")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from ttrl_lightning.data.tasks import generate_prompts

    prompts = generate_prompts("arith", args.steps * args.prompts, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_model_dir(tmp, args.arch, args.seed, args.hidden, args.layers)
        runners = [("trl", run_trl), ("ours", run_ours)]
        if args.order == "ours-first":
            runners.reverse()
        res = {name: fn(model_dir, prompts, args) for name, fn in runners}
    for r in res.values():
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
        r["steps_per_s"] = r["steps"] / r["seconds"]
    ratio = {"tokens_per_s": res["ours"]["tokens_per_s"] / res["trl"]["tokens_per_s"],
             "steps_per_s": res["ours"]["steps_per_s"] / res["trl"]["steps_per_s"]}
    print(f"GRPO step benchmark: {args.arch} hidden={args.hidden} layers={args.layers}, {args.prompts} prompts x "
          f"N={args.n}, max_new_tokens={args.max_new_tokens}, {args.steps} steps, beta={args.beta}, "
          f"torch threads={torch.get_num_threads()}")
    print(f"{'':6} {'steps':>6} {'seconds':>9} {'tokens':>8} {'tokens/s':>10} {'steps/s':>8}")
    for name in ("ours", "trl"):
        r = res[name]
        print(f"{name:6} {r['steps']:>6} {r['seconds']:>9.2f} {r['tokens']:>8} {r['tokens_per_s']:>10.1f} "
              f"{r['steps_per_s']:>8.3f}")
    print(f"ratio ours/TRL: rollout tokens/s {ratio['tokens_per_s']:.2f}x, optimizer steps/s "
          f"{ratio['steps_per_s']:.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "results": res, "ratio_ours_over_trl": ratio}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a real-model TTRL step's time goes, stage by stage, against each stage's floor on this machine.

Runs ``ttrl fit --config configs/ttrl/real_smollm2.yaml`` (SmolLM2-135M-Instruct from ``ttrl model import``, the
real-model benchmark's settings; ``--votes`` / ``--trained`` for the larger vote counts of the collapse study) for
``--steps`` training steps after ``--warmup`` untimed ones, timing every stage of the step in the same process:

==============  ===========================================================================================
stage           what is timed
==============  ===========================================================================================
sampling        ``TTRLModule.rollout``: the engine's ``generate`` of M votes per question
labelling       ``scored``: answers, pseudo-labels, rewards laid out on the trained rows
reference       the no-grad log-prob pass of the reference (initial copy or EMA anchor)
policy_fwd      the policy's log-prob pass with gradients
backward        ``manual_backward`` of the loss
optimizer       gradient clipping and ``optimizer.step`` (AdamW), and the EMA anchor's update if any
evaluation      periodic held-out evaluation (``--val-every``; validation loops)
rest            logging, metrics, callbacks, data loading: the step's wall time minus the stages above
==============  ===========================================================================================

The floor of a model stage is its matmul FLOPs divided by this machine's matmul throughput in that stage's dtype,
measured in the same run on the stage's own GEMM shapes (``[tokens, hidden] x [hidden, out]`` of the model's
projections and its LM head; no datasheet number): forward ``2 P T`` FLOPs over the tokens ``T`` a pass
processes (P the projection parameters a token multiplies; the LM head's only on the completion positions,
where the training passes compute it), backward twice the forward; sampling ``2 P`` per generated token plus
the prompt prefill, the head included (every decode step and the prompt's last position need logits; the
prefill's other positions are counted with the head too: an upper bound of a few percent). Attention's own FLOPs (prompts of ~60 tokens) and the elementwise ops
are not in the floor: the ratio shows how far the step is from the matmul bound.

Prints one table (seconds per step, GFLOP, floor, ratio), the step's total against its floor, peak resident
memory, the thread settings, the CPU's float features (AVX2, AVX-512, AVX512-BF16, AMX) and the precision in use;
writes JSON.

    ttrl model import --out models/smollm2
    python -m benchmarks.training.ttrl_step_breakdown --model models/smollm2 [--votes 32 --trained 16] [--steps 3]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from collections import defaultdict

from benchmarks.common import _status_kib, reset_peak_rss, write_json
from benchmarks.common import cpu_features, git_commit, peak_rss_gb

CONFIG = "ttrl/real_smollm2.yaml"
CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
INSTRUCTION = "Answer with just the number."
#: --adamw foreach / single: AdamW's implementation for the run (None: torch's default, single-tensor on CPU)
FOREACH: bool | None = None
STAGES = ("sampling", "labelling", "reference", "policy_fwd", "backward", "optimizer", "evaluation", "rest")


def gemm_rate(shapes: list[tuple[int, int, int]], dtype, seconds: float = 1.0) -> float:
    """FLOP/s of ``[m, k] @ [k, n]`` over ``shapes`` (each repeated for ~``seconds`` / len(shapes)), in ``dtype``."""
    import torch

    flops = 0.0
    elapsed = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        torch.matmul(a, b)  # warm-up
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / len(shapes):
            torch.matmul(a, b)
            reps += 1
        elapsed += time.perf_counter() - t0
        flops += 2.0 * m * k * n * reps
    return flops / elapsed


def model_shapes(config) -> tuple[list[tuple[int, int]], int]:
    """The ``(in, out)`` of every projection a token multiplies (per layer: q, k, v, o, gate, up, down; then the
    LM head) and their parameter count P (the head's ``hidden x vocab`` the last term)."""
    h, inter, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or h // heads
    layer = [(h, heads * d), (h, kv * d), (h, kv * d), (heads * d, h), (h, inter), (h, inter), (inter, h)]
    shapes = layer * L + [(h, config.vocab_size)]
    return shapes, sum(i * o for i, o in shapes)


def held_tensors(module, optimizer) -> dict[str, float]:
    """GB of what a TTRL step keeps from one step to the next: the policy's parameters, the reference's (the
    initial copy, or the EMA anchor that ``EMAAnchor`` sets as the reference; its own storage only: a tensor
    shared with the policy is not counted twice, and a reference kept on disk, ``grpo.reference_storage: disk``,
    holds none) and the optimizer's state."""
    seen: set[int] = set()

    def size(tensors) -> float:
        total = 0
        for t in tensors:
            if t is None or t.is_meta or t.untyped_storage().data_ptr() in seen:  # meta: on disk between uses
                continue
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()
        return total / 2**30

    out = {"policy": size(module.policy.parameters())}
    ref = getattr(module, "reference_model", None)
    if ref is not None:
        out["reference"] = size(list(ref.parameters()) + list(ref.buffers()))
    out["optimizer_state"] = size(v for state in optimizer.state.values() for v in state.values()
                                  if hasattr(v, "untyped_storage"))
    return out


class StageClock:
    """Wall time per stage, per training step, by wrapping the module's methods (and the optimizer's step)."""

    def __init__(self):
        self.current: dict[str, float] = defaultdict(float)
        self.tokens: dict[str, int] = defaultdict(int)
        self.steps: list[dict] = []
        self.step_start = None
        self.eval_time = 0.0
        #: stage -> the largest resident memory (GB) seen inside it (Linux: the peak counter is reset at the
        #: stage's start, read at its end), over every step
        self.peak_gb: dict[str, float] = defaultdict(float)

    def stage_peak(self, stage: str) -> None:
        """Record the peak resident memory since the last reset under ``stage``, and reset the counter."""
        self.peak_gb[stage] = max(self.peak_gb[stage], _status_kib("VmHWM") / 2**20)
        reset_peak_rss()

    def timed(self, stage, fn, count=None):
        def wrapper(*args, **kwargs):
            self.stage_peak("rest")  # what ran since the last stage: logging, metrics, data
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            self.current[stage] += time.perf_counter() - t0
            self.stage_peak(stage)
            if count is not None:
                self.tokens[stage] += count(args, kwargs, out)
            return out
        return wrapper


def attach(module, clock: StageClock) -> None:
    import lightning.pytorch as pl
    import torch

    def sampled_tokens(args, kwargs, out):
        """Generated tokens, plus each prompt once (the prompt-shared prefill)."""
        return int(out.completion_mask.sum()) + int(out.prompt_mask.sum()) // max(out.n, 1)

    module.rollout = clock.timed("sampling", module.rollout, sampled_tokens)
    module.scored = clock.timed("labelling", module.scored)
    inner = module.sequence_logprobs

    def logprobs(model, rollouts, *args, **kwargs):
        stage = "policy_fwd" if model is module.policy and torch.is_grad_enabled() else "reference"
        if model is module.policy and not torch.is_grad_enabled():
            stage = "reference"  # the old policy's no-grad pass counts with the no-grad passes
        clock.stage_peak("rest")
        t0 = time.perf_counter()
        out = inner(model, rollouts, *args, **kwargs)
        clock.current[stage] += time.perf_counter() - t0
        clock.stage_peak(stage)
        clock.tokens[stage] += int(rollouts.prompt_mask.sum() + rollouts.completion_mask.sum())
        # the LM head runs on the completion positions only (fused log-probs, logits_to_keep)
        clock.tokens[stage + "_head"] += int(rollouts.completion_mask.shape[0] * rollouts.completion_mask.shape[1])
        return out

    module.sequence_logprobs = logprobs
    weights = module.reference_weights

    @contextlib.contextmanager
    def reference_weights():
        """The reference's weights made ready (the read of its file under grpo.reference_storage: disk)
        count with the reference pass."""
        clock.stage_peak("rest")
        t0 = time.perf_counter()
        with weights() as reference:
            clock.current["reference"] += time.perf_counter() - t0
            yield reference

    module.reference_weights = reference_weights
    module.manual_backward = clock.timed("backward", module.manual_backward)
    clip = module.clip_gradients
    module.clip_gradients = clock.timed("optimizer", clip)

    class Hooks(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            clock.current = defaultdict(float)
            clock.tokens = defaultdict(int)
            clock.eval_time = 0.0
            opt = trainer.optimizers[0]
            if FOREACH is not None:  # the lever measured: AdamW's multi-tensor (foreach) path, or the default
                for group in opt.param_groups:
                    group["foreach"] = FOREACH
            if not getattr(opt, "_timed", False):
                opt.step = clock.timed("optimizer", opt.step)
                opt._timed = True
            clock.step_start = time.perf_counter()

        def on_validation_start(self, trainer, pl_module):
            self._v = time.perf_counter()

        def on_validation_end(self, trainer, pl_module):
            clock.eval_time += time.perf_counter() - self._v

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            total = time.perf_counter() - clock.step_start
            rec = dict(clock.current)
            rec["total_excl_eval"] = total
            rec["tokens"] = dict(clock.tokens)
            rec["rows"] = None
            clock.steps.append(rec)

    return Hooks()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a local model folder (ttrl model import --out DIR)")
    p.add_argument("--votes", type=int, default=8, help="M votes per question (the config's: 8)")
    p.add_argument("--trained", type=int, default=4, help="N of them trained on (the config's: 4)")
    p.add_argument("--questions", type=int, default=8, help="questions per step (the config's batch: 8)")
    p.add_argument("--steps", type=int, default=3, help="timed steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--engine", default="hf")
    p.add_argument("--extra", nargs="*", action="extend", default=[],
                   help="more `ttrl fit` options (e.g. a lever to measure); repeat it (--extra=--a=1 --extra=--b=2): "
                        "every one is kept")
    p.add_argument("--adamw", choices=("default", "foreach", "single"), default="default",
                   help="AdamW's implementation (torch's default on CPU: single-tensor)")
    p.add_argument("--out", default="outputs/bench/ttrl_step_breakdown.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    global FOREACH
    FOREACH = {"default": None, "foreach": True, "single": False}[args.adamw]

    import torch

    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.fit import make_cli
    from ttrl_lightning.data.questions import task_splits, write_questions

    steps = args.warmup + args.steps
    tmp = tempfile.mkdtemp(prefix="ttrl_breakdown_")
    questions = os.path.join(tmp, "questions.jsonl")
    write_questions(questions, task_splits("reasoning_gym:chain_sum", 0, {"q": args.questions * steps},
                                           instruction=INSTRUCTION, **CHAIN_SUM)["q"])
    fit_args = ["--config", config_path(CONFIG), "--model.init_args.policy.model", args.model,
                "--data.init_args.path", questions, "--data.init_args.batch_size", str(args.questions),
                "--model.init_args.voting.num_votes", str(args.votes),
                "--model.init_args.voting.num_trained", str(args.trained),
                "--model.init_args.engine", args.engine,
                "--trainer.max_steps", str(steps), "--trainer.max_epochs", "1",
                "--trainer.default_root_dir", tmp, "--trainer.logger", "false",
                "--trainer.enable_progress_bar", "false", *args.extra]
    cli = make_cli(fit_args, run=False)
    clock = StageClock()
    cli.trainer.callbacks.append(attach(cli.model, clock))
    t0 = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    wall = time.perf_counter() - t0
    timed = clock.steps[args.warmup:]
    if not timed:
        raise SystemExit("no timed step ran")

    # the floors: this machine's GEMM rate on the stage's shapes, in the dtype the stage runs in
    config = cli.model.policy.config
    shapes, P = model_shapes(config)
    precision = str(cli.trainer.precision)  # cli.precision's choice, or --extra --trainer.precision ...
    dtype = torch.bfloat16 if precision.startswith("bf16") else next(cli.model.policy.parameters()).dtype
    rows = {st: sum(s.get("tokens", {}).get(st, 0) for s in timed) / len(timed)
            for st in ("reference", "policy_fwd", "sampling", "reference_head", "policy_fwd_head")}
    head = config.hidden_size * config.vocab_size
    body = P - head
    sample_tokens = rows["sampling"]
    decode_shapes = [(args.questions * args.votes, i, o) for i, o in shapes[:7] + shapes[-1:]]
    train_shapes = [(int(rows["policy_fwd"]) or 1, i, o) for i, o in shapes[:7] + shapes[-1:]]
    rate_decode = gemm_rate(decode_shapes, dtype)
    rate_train = gemm_rate(train_shapes, dtype)
    # training passes: the body on every prompt and completion position, the head on the completion positions
    passes = {st: body * rows[st] + head * rows[st + "_head"] for st in ("reference", "policy_fwd")}
    flops = {"sampling": 2.0 * P * sample_tokens, "reference": 2.0 * passes["reference"],
             "policy_fwd": 2.0 * passes["policy_fwd"], "backward": 4.0 * passes["policy_fwd"]}
    rate = {"sampling": rate_decode, "reference": rate_train, "policy_fwd": rate_train, "backward": rate_train}
    mean = {st: sum(s.get(st, 0.0) for s in timed) / len(timed) for st in STAGES if st not in ("rest", "evaluation")}
    total = sum(s["total_excl_eval"] for s in timed) / len(timed)
    mean["evaluation"] = clock.eval_time
    mean["rest"] = total - sum(v for k, v in mean.items() if k != "evaluation")
    floor = {st: flops[st] / rate[st] for st in flops}
    floor_total = sum(floor.values())
    peak_gb = max(peak_rss_gb(), *clock.peak_gb.values())  # the reset counters hide earlier peaks from ru_maxrss
    held = held_tensors(cli.model, cli.trainer.optimizers[0])
    features = cpu_features()
    commit = git_commit()

    print(f"\n{args.questions} questions x {args.votes} votes ({args.trained} trained), {args.engine} engine, "
          f"precision {precision} (model passes in {dtype}), {len(timed)} timed steps after {args.warmup}")
    print(f"{'stage':<12} {'s/step':>8} {'share':>6} {'GFLOP':>8} {'floor s':>8} {'ratio':>6}")
    for st in STAGES:
        fl = flops.get(st)
        line = f"{st:<12} {mean[st]:8.2f} {100 * mean[st] / total:5.1f}%"
        if fl is not None:
            line += f" {fl / 1e9:8.1f} {floor[st]:8.2f} {mean[st] / floor[st]:6.2f}"
        print(line)
    print(f"{'step':<12} {total:8.2f} {'':>6} {sum(flops.values()) / 1e9:8.1f} {floor_total:8.2f} "
          f"{total / floor_total:6.2f}")
    print(f"GEMM rate ({dtype}): decode shapes {rate_decode / 1e9:.0f} GFLOP/s, training shapes "
          f"{rate_train / 1e9:.0f} GFLOP/s; threads {torch.get_num_threads()} (interop "
          f"{torch.get_num_interop_threads()})")
    print(f"peak resident memory {peak_gb:.2f} GB; wall {wall:.0f} s; CPU {features}")
    print("peak resident memory inside each stage (GB): " + ", ".join(
        f"{st} {clock.peak_gb[st]:.2f}" for st in STAGES if st in clock.peak_gb))
    print("tensors held across steps (GB): " + ", ".join(f"{k} {v:.2f}" for k, v in held.items()))
    report = {"settings": vars(args), "commit": commit, "cpu": features, "dtype": str(dtype), "precision": precision,
              "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
              "seconds_per_step": mean, "step_seconds": total, "gflop": {k: v / 1e9 for k, v in flops.items()},
              "floor_seconds": floor, "floor_step_seconds": floor_total, "ratio_to_floor": total / floor_total,
              "gemm_gflops": {"decode": rate_decode / 1e9, "train": rate_train / 1e9},
              "tokens_per_step": rows,
              "peak_rss_gb": peak_gb, "stage_peak_rss_gb": dict(clock.peak_gb), "held_gb": held,
              "wall_seconds": wall, "steps": timed}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json(args.out, json.loads(json.dumps(report, default=str)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

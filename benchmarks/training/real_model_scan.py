"""Which reasoning-gym tasks put a real pretrained model in TTRL's regime, measured before any training.

The first part of the real-model benchmark (issue 22, item 4): for each candidate (a reasoning-gym generator and
its difficulty config) it samples ``--k`` completions of ``--n`` questions with the model (the HF engine, the one
prompt rule of ``prompt_format``) and prints avg@k, maj@k and whether the candidate is in TTRL's regime:

    maj@k - avg@k >= 10 points   and   15% <= avg@k <= 60%

(the majority is right clearly more often than one sample, and there is room to learn). The generator's own
``score_answer`` is run beside the answer equivalence on every sample and their disagreements are printed. The
JSON is rewritten after every candidate, so an interrupted scan keeps what it measured.

    ttrl model import --out models/smollm2
    python -m benchmarks.training.real_model_scan --model models/smollm2            # the default candidates, ~25 min
    python -m benchmarks.training.real_model_scan --model models/smollm2 --n 16 --k 8 --candidates chain_sum:2x1
"""
from __future__ import annotations

import argparse
import json
import sys
import time

#: name -> (reasoning-gym generator, its config); names say the difficulty (terms x digits, animals, ...)
CANDIDATES = {
    "chain_sum:2x1": ("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}),
    "chain_sum:3x1": ("chain_sum", {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1}),
    "chain_sum:2x2": ("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}),
    "basic_arithmetic:2x1": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}),
    "leg_counting:2": ("leg_counting", {"min_animals": 2, "max_animals": 2, "max_instances": 2}),
    "count_bits:small": ("count_bits", {"min_n": 1, "max_n": 64}),
}
#: the regime's bounds: the majority's lead over one sample, and one sample's accuracy
MIN_LEAD, AVG_RANGE = 0.10, (0.15, 0.60)
#: majority TTRL's step-0 reward accuracy the regime asks for (``SampledMetrics.reward_accuracy``; the TTRL
#: authors report above 0.8 in all their runs, the issue aims at 0.7)
MIN_REWARD_ACCURACY = 0.70


def in_regime(avg: float, maj: float, reward_accuracy: float | None = None) -> bool:
    """maj@k leads avg@k by MIN_LEAD, avg@k inside AVG_RANGE and, when given, the step-0 reward accuracy at
    least MIN_REWARD_ACCURACY (None: not measured, e.g. a report written before it was)."""
    lead = maj - avg >= MIN_LEAD and AVG_RANGE[0] <= avg <= AVG_RANGE[1]
    return lead and (reward_accuracy is None or reward_accuracy >= MIN_REWARD_ACCURACY)


def main(argv: list[str] | None = None) -> int:
    from ttrl_lightning.answers import ANSWER_EXTRACTORS
    from ttrl_lightning.data.questions import task_splits
    from ttrl_lightning.data.reasoning_gym_tasks import PREFIX, sampled_gold_check
    from ttrl_lightning.eval.sampled import evaluate_sampled
    from ttrl_lightning.models import load_model, load_tokenizer
    from ttrl_lightning.prompt_format import PROMPT_FORMATS
    from ttrl_lightning.rollout.requests import PromptRenderer
    from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams
    from ttrl_lightning.safe_files import atomic_write

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a local checkpoint folder (ttrl model import --out DIR)")
    p.add_argument("--candidates", nargs="+", choices=sorted(CANDIDATES), default=list(CANDIDATES))
    p.add_argument("--n", type=int, default=32, help="questions per candidate")
    p.add_argument("--k", type=int, default=16, help="samples per question")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="auto")
    p.add_argument("--seed", type=int, default=0, help="the seed of the questions' stream")
    p.add_argument("--out", default="outputs/bench/real_model_scan.json")
    args = p.parse_args(argv)

    tok = load_tokenizer(args.model)
    model = load_model(args.model, tok).eval()
    extract = ANSWER_EXTRACTORS["last_number"]
    engine = HFGenerateEngine(tok)
    report = {"settings": vars(args), "regime": {"min_lead": MIN_LEAD, "avg_range": list(AVG_RANGE)},
              "candidates": {}}
    print(f"{'candidate':<22} {'avg@' + str(args.k):>8} {'maj@' + str(args.k):>8} {'lead':>7} {'rew acc':>8}  regime  "
          "scorer-only / equivalence-only  seconds", flush=True)
    for name in args.candidates:
        generator, config = CANDIDATES[name]
        task = PREFIX + generator
        t0 = time.perf_counter()
        questions = task_splits(task, args.seed, {"scan": args.n}, **config)["scan"]  # distinct questions
        params = SamplingParams(n=args.k, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                                seed=args.seed)
        metrics, _ = evaluate_sampled(model, tok, questions, args.k, params, batch_size=8, engine=engine,
                                      extract=extract, renderer=PromptRenderer(tok, None, args.prompt_format))
        check = sampled_gold_check(task, metrics.per_question, **config)
        avg, maj, reward = metrics.avg_at_k, metrics.maj_at_k, metrics.reward_accuracy
        entry = {"generator": generator, "config": config, "avg": avg, "maj": maj, "pass": metrics.pass_at_k,
                 "reward_accuracy": reward, "in_regime": in_regime(avg, maj, reward), "gold_check": check,
                 "seconds": round(time.perf_counter() - t0, 1)}
        report["candidates"][name] = entry
        print(f"{name:<22} {100 * avg:7.1f}% {100 * maj:7.1f}% {100 * (maj - avg):+6.1f} {_pct(reward):>8}  "
              f"{'yes' if entry['in_regime'] else 'no':<6}  {check['score_answer_only']:>5} / "
              f"{check['project_only']:<5}                    {entry['seconds']:>7.0f}", flush=True)
        with atomic_write(args.out) as fh:
            json.dump(report, fh, indent=1)
    chosen = [n for n, e in report["candidates"].items() if e["in_regime"]]
    print(f"in TTRL's regime: {', '.join(chosen) or 'none'}; {args.out}")
    return 0


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


if __name__ == "__main__":
    sys.exit(main())

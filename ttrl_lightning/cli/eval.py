"""``ttrl eval``: sample k completions per question and report avg@k, maj@k and pass@k.

Every option is checked before the model is loaded (:mod:`.arguments`; a bad one is one line naming the
flag, exit 1), then the questions (a bad row is one line naming the file, row and field), then the model
(:mod:`.policy_source`). The report (``--out``) is written atomically (:mod:`ttrl_lightning.safe_files`).
"""
from __future__ import annotations

import argparse
import json
import os
import time

from ..answers.extractors import ANSWER_EXTRACTORS
from ..errors import UserError
from ..prompt_format import PROMPT_FORMATS
from ..safe_files import atomic_write, same_file
from .arguments import (EXIT_CODES, CommandParser, given, nonnegative_float, nonnegative_int, positive_int,
                        samples_per_question, seed, unit_float)
from .engines import add_engine_arguments, build_sampling_engine, check_engine_options

#: the default generation length of a tiny model (a real checkpoint needs --max-new-tokens)
TINY_MAX_NEW_TOKENS = 32
_MAX_NEW_TOKENS_REQUIRED = ("argument --max-new-tokens: required for a real checkpoint (how long may an "
                            "answer be? e.g. 3072 for TTRL's math recipe)")

DESCRIPTION = """Sample --k completions per question and report three accuracies (fractions of questions):

  avg@k   the mean over questions of the share of the k samples that are correct: the accuracy of ONE
          sample, averaged over k draws (TTRL's reported "avg@16" / "mean@16", at T=0.6, top-p 0.95)
  maj@k   the majority answer of the k samples is correct (self-consistency; ties go to the answer
          sampled first; unextractable answers vote together and are never correct)
  pass@k  at least one of the k samples is correct: an oracle's upper bound, not an accuracy anyone gets
          without the gold answer (TTRL's logged "pass@64" is this with k=64; do not compare it with avg@16)

Answers are extracted with --answer-extractor (answers.ANSWER_EXTRACTORS; default final_answer: the last
\\boxed{...}, else "The answer is X", options of multiple-choice questions become their letter;
last_number: the last number, for the generated arithmetic tasks) and compared with the gold answer by
answer equivalence. Use the extractor the model was trained with (TTRLModule's voting.answer_extractor).
Every question needs a gold answer. Questions come from a file (--data: .jsonl or .parquet with id,
prompt or question, gold, choices, image, reframed_prompt; see docs/evaluation.md) or a generated task
(--task). The model is tiny:<arch>, a local Hugging Face checkpoint folder, or a Lightning .ckpt written
by `ttrl fit`."""


def top_p(text: str) -> float:
    """A number in (0, 1]."""
    try:
        value = unit_float(text)
    except argparse.ArgumentTypeError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def build_parser() -> CommandParser:
    p = CommandParser(prog="ttrl eval", description=DESCRIPTION, epilog=EXIT_CODES)
    p.add_argument("--model", required=True, metavar="MODEL",
                   help="tiny:<arch>, a local Hugging Face checkpoint folder, or a .ckpt written by "
                        "`ttrl fit`")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", metavar="FILE",
                     help="a question file, .jsonl or .parquet (every row with a gold)")
    src.add_argument("--task", metavar="NAME", help="a generated task (data.tasks.TASKS, e.g. arith, arith3) or "
                     "a reasoning-gym generator, reasoning_gym:<name> (e.g. reasoning_gym:chain_sum; its "
                     "score_answer checks gold beside the answer equivalence)")
    p.add_argument("--n", type=positive_int, default=64, help="questions of --task (only with --task)")
    p.add_argument("--task-seed", type=seed, default=0,
                   help="seed of the --task questions (only with --task)")
    p.add_argument("--k", type=samples_per_question, default=16, help="completions sampled per question")
    p.add_argument("--temperature", type=nonnegative_float, default=0.6,
                   help="sampling temperature (0: greedy, then all k samples are the same)")
    p.add_argument("--top-p", type=top_p, default=0.95, help="nucleus sampling, in (0, 1] (1: off)")
    p.add_argument("--top-k", type=nonnegative_int, default=0, help="top-k sampling (0: off)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help=f"tokens generated per sample at most; required for a real checkpoint "
                        f"(default {TINY_MAX_NEW_TOKENS} for a tiny model)")
    p.add_argument("--seed", type=seed, default=0,
                   help="sampling seed (and initialisation of a tiny:<arch> model)")
    p.add_argument("--batch-size", type=positive_int, default=16,
                   help="questions per generate call (batch-size x k sequences)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="cast the model's weights (default: the checkpoint's)")
    add_engine_arguments(p)
    p.add_argument("--out", default=None, metavar="FILE.json",
                   help="write a JSON report: the settings, the metrics, and per question the extracted "
                        "answers, the majority answer and the completions")
    p.add_argument("--answer-extractor", choices=ANSWER_EXTRACTORS.names(), default="final_answer",
                   help="how a completion's answer is read (default final_answer; last_number for the "
                        "generated arithmetic tasks)")
    p.add_argument("--prompt-format", choices=PROMPT_FORMATS, default="auto",
                   help="how a prompt becomes the model input, as in ttrl fit and ttrl generate: chat (the "
                        "model's chat template), plain (as written), auto (chat when the model has a template; "
                        "default). A prompt that already holds the template is not wrapped again")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _device(parser: CommandParser, text: str | None) -> str:
    import torch

    if text is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        parser.error(f"argument --device: not a torch device, got {text!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"argument --device: {text!r} but CUDA is not available")
    return str(device)


def _check_options(parser: CommandParser, args: argparse.Namespace, argv: list[str]) -> None:
    """What argparse cannot check alone: task-only options, the task name, the output path."""
    check_engine_options(parser, args, argv)
    if args.data is not None:
        for flag in ("--n", "--task-seed"):
            if given(argv, flag):
                parser.error(f"argument {flag}: only with --task (--data reads every question of the file)")
    if args.task is not None:
        from ..data.tasks import TASKS

        from ..data.reasoning_gym_tasks import is_reasoning_gym

        if args.task not in TASKS and not is_reasoning_gym(args.task):
            parser.error(f"argument --task: unknown task {args.task!r}; known: {', '.join(TASKS.names())} or "
                         "reasoning_gym:<generator>")
    if args.out is not None:
        if not args.out.endswith(".json"):
            parser.error(f"argument --out: the report is a .json file, got {args.out!r}")
        if os.path.isdir(args.out):
            parser.error(f"argument --out: {args.out!r} is a directory")
        for flag, path in (("--data", args.data), ("--model", args.model)):
            if path is not None and os.path.exists(path) and same_file(path, args.out):
                parser.error(f"argument --out: {args.out!r} would overwrite {flag} {path!r}")


def _questions(args: argparse.Namespace) -> list[dict]:
    from ..data.questions import few_ids, read_questions, task_splits

    if args.task is not None:  # the first --n distinct questions of the task's stream (data.splits)
        return task_splits(args.task, args.task_seed, {"questions": args.n})["questions"]
    questions = read_questions(args.data)
    ungraded = [q["id"] for q in questions if q["gold"] is None]
    if ungraded:
        raise UserError(f"{args.data}: {len(ungraded)} question(s) have no gold answer, which ttrl eval "
                        f"needs: {few_ids(ungraded)}")
    return questions


def settings_line(settings: dict) -> str:
    """The sampling settings on one line, ``key=value`` each."""
    keys = ("k", "temperature", "top_p", "top_k", "max_new_tokens", "seed", "batch_size", "answer_extractor",
            "engine")
    return "sampling: " + " ".join(f"{k}={settings[k]}" for k in keys)


def metrics_lines(metrics) -> list[str]:
    """``avg@k``, ``maj@k``, ``pass@k`` as percentages with what each one means."""
    k = metrics.k
    rows = ((f"avg@{k}", metrics.avg_at_k, "mean share of correct samples (accuracy of one sample)"),
            (f"maj@{k}", metrics.maj_at_k, f"the majority answer of the {k} samples is correct"),
            (f"pass@{k}", metrics.pass_at_k, f"at least one of the {k} samples is correct (oracle bound)"))
    width = max(len(name) for name, _, _ in rows)
    return [f"{name:<{width}}  {100 * value:6.2f}%   {what}" for name, value, what in rows]


def _generator_gold_check(args, metrics, questions) -> dict | None:
    """For a reasoning-gym ``--task``, or a ``--data`` file whose questions record a reasoning-gym generator
    (``ttrl questions`` writes it): the generator's ``score_answer`` on every sample beside the project's answer
    equivalence (``reasoning_gym_tasks.gold_check``); None for other questions."""
    from ..data.reasoning_gym_tasks import generator_gold_check, is_reasoning_gym, sampled_gold_check

    if is_reasoning_gym(args.task):
        return sampled_gold_check(args.task, metrics.per_question)
    by_id = {q["id"]: q.get("generator") for q in questions}
    return generator_gold_check(metrics.per_question, [by_id.get(pq["id"]) for pq in metrics.per_question])


def eval_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_options(parser, args, argv)
    device = _device(parser, args.device)
    from .policy_source import load_policy, policy_kind

    kind = policy_kind(args.model)
    max_new = args.max_new_tokens
    if max_new is None and kind == "hf":
        parser.error(_MAX_NEW_TOKENS_REQUIRED)
    questions = _questions(args)
    t0 = time.perf_counter()
    policy = load_policy(args.model, dtype=args.dtype, device=device, seed=args.seed)
    if max_new is None:
        if not policy.is_tiny:  # a .ckpt trained from a real checkpoint
            parser.error(_MAX_NEW_TOKENS_REQUIRED)
        max_new = TINY_MAX_NEW_TOKENS
    t_load = time.perf_counter() - t0

    from ..eval.sampled import evaluate_sampled
    from ..models import load_processor
    from ..rollout import SamplingParams
    from ..rollout.requests import PromptRenderer

    # a vision-language model's processor places the images (its load is skipped for text questions)
    processor = load_processor(args.model) if any(q.get("images") for q in questions) else None
    renderer = PromptRenderer(policy.tokenizer, processor, args.prompt_format, model=args.model, source=args.data)
    prompt_format = renderer.format

    params = SamplingParams(n=args.k, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            max_new_tokens=max_new, seed=args.seed)
    settings = {"model": args.model, "model_kind": kind, "data": args.data, "task": args.task,
                "n": args.n if args.task else None, "task_seed": args.task_seed if args.task else None,
                "k": args.k, "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
                "max_new_tokens": max_new, "seed": args.seed, "batch_size": args.batch_size,
                "device": device, "dtype": args.dtype, "answer_extractor": args.answer_extractor,
                "engine": args.engine, "prompt_format": prompt_format}
    print(settings_line(settings), flush=True)
    t1 = time.perf_counter()
    engine = build_sampling_engine(args, policy.tokenizer, processor=processor)
    metrics, texts = evaluate_sampled(policy.model, policy.tokenizer, questions, args.k, params,
                                      batch_size=args.batch_size, engine=engine, progress=not args.no_progress,
                                      extract=ANSWER_EXTRACTORS[args.answer_extractor], processor=processor,
                                      renderer=renderer)
    t_eval = time.perf_counter() - t1
    for line in metrics_lines(metrics):
        print(line)
    gold = _generator_gold_check(args, metrics, questions)
    if gold is not None:
        source = args.task or ", ".join(gold["generators"]) + f" (recorded in {args.data})"
        print(f"gold check ({source}'s score_answer beside the answer equivalence): "
              f"{gold['samples']:,} samples, {100 * gold['score_answer_accuracy']:.2f}% right by the scorer vs "
              f"{100 * gold['project_accuracy']:.2f}%; {gold['project_only']} right only by the equivalence, "
              f"{gold['score_answer_only']} only by the scorer"
              + (f"; the scorer raised on {gold['scorer_errors']} (counted as wrong)" if gold["scorer_errors"] else ""))
    print(f"\n{metrics.num_questions:,} questions x {args.k} samples in {t_eval:.1f} s "
          f"(model loaded in {t_load:.1f} s)" + (f"; report: {args.out}" if args.out else ""))
    if args.out is not None:
        report = {"settings": settings, "metrics": metrics.as_dict(), "gold_check": gold,
                  "questions": [{**pq, "completions": t} for pq, t in zip(metrics.per_question, texts)],
                  "seconds": {"load": round(t_load, 3), "sample": round(t_eval, 3)}}
        with atomic_write(args.out) as fh:
            json.dump(report, fh, indent=1, allow_nan=False)
            fh.write("\n")
    return 0

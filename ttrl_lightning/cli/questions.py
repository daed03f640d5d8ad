"""``ttrl questions``: a generated task as a question file, the one input ``ttrl fit``, ``ttrl eval`` and
``ttrl generate`` all read.

    ttrl questions --task reasoning_gym:chain_sum --config '{"min_terms": 2, "max_terms": 2}' --n 300 \\
        --seed 1 --instruction "Answer with just the number." --out questions/chain_sum.jsonl

writes one JSON line per question (``id``, ``prompt``, ``gold``; :func:`ttrl_lightning.data.questions.read_questions`
reads it back before the command ends), atomically. ``--task`` is a generated task of ``data.tasks.TASKS`` or a
reasoning-gym generator (``reasoning_gym:<name>``, extra ``real-model``), ``--config`` its settings as a JSON
object, ``--instruction`` a sentence appended to every prompt (``data.questions.with_instruction``). The prompts
are written as the generator gives them (plus the instruction): the chat template is applied by the commands
that sample (``prompt_format``). The questions are distinct, and ``--exclude FILE...`` leaves out every question
of those files, so a held-out file shares no question with a training file (``data.splits``: the stream of
``--seed`` is read until ``--n`` new questions are found; a task too small for that is one error naming how
many distinct questions it gave). It prints the split's size and its overlap with each excluded file.
"""
from __future__ import annotations

import json

from ..errors import UserError
from .arguments import EXIT_CODES, CommandParser, positive_int, seed


def build_parser() -> CommandParser:
    p = CommandParser(prog="ttrl questions", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES)
    p.add_argument("--task", required=True, metavar="NAME",
                   help="a generated task (data.tasks.TASKS) or reasoning_gym:<generator>")
    p.add_argument("--config", default="{}", metavar="JSON", help="the task's settings, a JSON object")
    p.add_argument("--n", type=positive_int, default=64, help="questions to write")
    p.add_argument("--seed", type=seed, default=0, help="seed of the questions")
    p.add_argument("--instruction", default=None, metavar="TEXT",
                   help="a sentence appended to every prompt (e.g. 'Answer with just the number.')")
    p.add_argument("--exclude", nargs="+", default=[], metavar="FILE",
                   help="question files whose questions this one must not hold (by normalised prompt text and "
                        "image bytes: data.splits.question_key)")
    p.add_argument("--out", required=True, metavar="FILE.jsonl", help="the question file to write")
    return p


def questions_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.out.endswith(".jsonl"):
        parser.error(f"argument --out: a question file written here ends in .jsonl, got {args.out!r}")
    try:
        config = json.loads(args.config)
    except json.JSONDecodeError as err:
        parser.error(f"argument --config: not JSON ({err.msg})")
    if not isinstance(config, dict):
        parser.error(f"argument --config: a JSON object of the task's settings, got {args.config!r}")
    from ..data.questions import read_questions, task_splits, write_questions
    from ..data.splits import keys_of
    from ..data.reasoning_gym_tasks import is_reasoning_gym
    from ..data.tasks import TASKS

    if args.task not in TASKS and not is_reasoning_gym(args.task):
        parser.error(f"argument --task: unknown task {args.task!r}; known: {', '.join(TASKS.names())} or "
                     "reasoning_gym:<generator>")
    excluded = {path: keys_of(read_questions(path)) for path in args.exclude}
    try:
        questions = task_splits(args.task, args.seed, {"questions": args.n},
                                exclude=set().union(*excluded.values()),
                                instruction=args.instruction, **config)["questions"]
    except TypeError as err:
        raise UserError(f"{args.task}: bad --config ({err})") from None
    write_questions(args.out, questions)
    print(f"wrote {len(questions)} distinct questions of {args.task} (seed {args.seed}) to {args.out}")
    written = keys_of(questions)
    for path, keys in excluded.items():
        print(f"  overlap with {path} ({len(keys)} questions): {len(written & keys)}")
    return 0

"""``ttrl questions``: a generated task as a question file, the one input ``ttrl fit``, ``ttrl eval`` and
``ttrl generate`` all read.

    ttrl questions --task reasoning_gym:chain_sum --config '{"min_terms": 2, "max_terms": 2}' --n 300 \\
        --seed 1 --instruction "Answer with just the number." --out questions/chain_sum.jsonl

writes one JSON line per question (``id``, ``prompt``, ``gold``; :func:`ttrl_lightning.data.questions.read_questions`
reads it back before the command ends), atomically. ``--task`` is a generated task of ``data.tasks.TASKS`` or a
reasoning-gym generator (``reasoning_gym:<name>``, extra ``real-model``) or ``scenes``, the generated image
questions of ``data.scenes`` (each image saved under ``images/`` beside the file; ``--config '{"kinds": [...]}'``
among ``data.scenes.question_file_kinds()``, by default the tool tasks with one image), ``--config`` its settings
as a JSON object, ``--instruction`` a sentence appended to every prompt (``data.questions.with_instruction``). The prompts
are written as the generator gives them (plus the instruction): the chat template is applied by the commands
that sample (``prompt_format``). The questions are distinct problems, and ``--exclude FILE...`` leaves out every
question of those files and its reordered twins (``7+12=`` for ``12+7=``), so a held-out file shares no problem
with a training file (``data.splits``: the stream of
``--seed`` is read until ``--n`` new questions are found; a task too small for that is one error naming how
many distinct questions it gave). It prints the split's size and its overlap with each excluded file.
"""
from __future__ import annotations

import json

from ..errors import UserError
from .arguments import EXIT_CODES, CommandParser, positive_int, seed

#: the task name of the generated image questions (``data.scenes``, ``generate.scene_questions``)
SCENES = "scenes"


def build_parser() -> CommandParser:
    p = CommandParser(prog="ttrl questions", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES)
    p.add_argument("--task", required=True, metavar="NAME",
                   help=f"a generated task (data.tasks.TASKS), reasoning_gym:<generator> or {SCENES} (generated "
                        "image questions, data.scenes)")
    p.add_argument("--config", default="{}", metavar="JSON", help="the task's settings, a JSON object")
    p.add_argument("--n", type=positive_int, default=64, help="questions to write")
    p.add_argument("--seed", type=seed, default=0, help="seed of the questions")
    p.add_argument("--instruction", default=None, metavar="TEXT",
                   help="a sentence appended to every prompt (e.g. 'Answer with just the number.')")
    p.add_argument("--exclude", nargs="+", default=[], metavar="FILE",
                   help="question files whose questions this one must not hold (by problem -- normalised prompt text, "
                        "a sum's or product's terms in any order -- and image bytes: data.splits.question_key)")
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

    if args.task not in TASKS and not is_reasoning_gym(args.task) and args.task != SCENES:
        parser.error(f"argument --task: unknown task {args.task!r}; known: {', '.join(TASKS.names())}, {SCENES} or "
                     "reasoning_gym:<generator>")
    excluded = {path: keys_of(read_questions(path)) for path in args.exclude}
    if args.task == SCENES:
        questions = _scene_questions(parser, args, config, list(excluded))
    else:
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


def _scene_questions(parser, args, config: dict, exclude: list[str]) -> list[dict]:
    """``--task scenes``: write the generated image questions (``generate.scene_questions``), each image under
    ``images/`` beside ``--out``; the questions as the file reads back."""
    import os

    from ..data.questions import read_questions
    from ..generate.scene_questions import IMAGE_TASKS, TOOL_IMAGE_TASKS, write_scene_questions

    unknown = sorted(set(config) - {"kinds"})
    if unknown:
        parser.error(f"argument --config: {SCENES} takes only 'kinds', got {unknown}")
    kinds = config.get("kinds", list(TOOL_IMAGE_TASKS))
    if not isinstance(kinds, list) or not kinds or any(k not in IMAGE_TASKS for k in kinds):
        parser.error(f"argument --config: {SCENES}' kinds must be a non-empty list among {', '.join(IMAGE_TASKS)}, "
                     f"got {kinds!r}")
    if args.instruction is not None:
        parser.error(f"argument --instruction: {SCENES}' prompts already ask for the answer in their own format "
                     "(\"The answer is X.\")")
    folder, name = os.path.split(os.path.abspath(args.out))
    questions = read_questions(write_scene_questions(folder, args.n, args.seed, kinds, exclude=exclude, name=name))
    print(f"wrote {len(questions)} distinct questions of {SCENES} {kinds} (seed {args.seed}) to {args.out}, their "
          f"images under {os.path.join(os.path.dirname(args.out) or '.', 'images')}")
    return questions

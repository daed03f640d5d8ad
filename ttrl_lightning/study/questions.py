"""The study's question splits as question files: one builder per ``questions.kind`` (:data:`QUESTION_KINDS`).

Every builder writes ``<out>/questions/<split>...`` and returns ``{split: path}``; the splits are pairwise
disjoint by problem (``data.splits``: a split is cut from one pool of distinct questions per source, and a split of
another source skips the questions already taken). :func:`split_digests` binds a record to their contents.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from ..registry import Registry
from .spec import QuestionsSpec, SpecError

__all__ = ["QUESTION_KINDS", "build_questions", "split_digests"]

#: ``questions.kind`` -> ``fn(questions_spec, folder) -> {split: question file}``
QUESTION_KINDS: Registry[Callable[[QuestionsSpec, str], dict[str, str]]] = Registry("study question kind")


@QUESTION_KINDS.register("task")
def task_questions(q: QuestionsSpec, folder: str) -> dict[str, str]:
    """Generated text questions (``data.tasks`` or ``reasoning_gym:<name>``), every split cut in order from its
    source's pool of distinct questions (``data.splits.draw_splits``); a split larger than its pool is one line."""
    from ..data.questions import task_source, write_questions
    from ..data.splits import SplitError, SplitSpec, draw_splits

    specs = [SplitSpec(name, src.n, task_source(src.task, src.seed, src.instruction, **src.task_kwargs))
             for name, src in q.sources().items()]
    try:
        splits = draw_splits(specs)
    except SplitError as e:
        raise SpecError(f"questions.splits: {e}") from None
    paths = {}
    for name, questions in splits.items():
        paths[name] = os.path.join(folder, f"{name}.jsonl")
        write_questions(paths[name], questions)
    return paths


@QUESTION_KINDS.register("scenes")
def scene_questions(q: QuestionsSpec, folder: str) -> dict[str, str]:
    """Generated image questions (``generate.scene_questions``) of the scene kind ``task``, each split skipping
    the questions of the splits before it (same prompt and pixels)."""
    from ..generate.scene_questions import write_scene_questions

    paths: dict[str, str] = {}
    for name, src in q.sources().items():
        paths[name] = write_scene_questions(os.path.join(folder, name), src.n, src.seed, kinds=(src.task,),
                                            exclude=list(paths.values()))
    return paths


def build_questions(q: QuestionsSpec, out: str) -> dict[str, str]:
    """The study's split files under ``<out>/questions`` (:data:`QUESTION_KINDS`), checked pairwise disjoint by
    problem: a shared question is refused (one line naming the splits)."""
    from ..data.questions import read_questions
    from ..data.splits import overlaps

    paths = QUESTION_KINDS[q.kind](q, os.path.join(out, "questions"))
    pairs = overlaps({k: read_questions(p) for k, p in paths.items()})
    shared = {f"{a} & {b}": n for (a, b), n in pairs.items() if n}
    if shared:
        raise SpecError(f"questions: the splits share problems: {shared}")
    print(f"questions: pairwise overlaps by problem (a reordered twin is the same problem): {len(pairs)} pairs, "
          "all 0", flush=True)
    return paths


def split_digests(paths: dict[str, str]) -> dict[str, dict]:
    """``{split: {"n", "ids", "sha256"}}``: each split's size, its question ids in order and a digest of its
    prompts and gold answers (what the record's per-question counts refer to)."""
    from ..data.questions import read_questions

    out = {}
    for name, path in paths.items():
        questions = read_questions(path)
        h = hashlib.sha256()
        for question in questions:
            h.update(f"{question['id']}\x00{question['prompt']}\x00{question.get('gold')}\n".encode())
        out[name] = {"n": len(questions), "ids": [str(x["id"]) for x in questions], "sha256": h.hexdigest()}
    return out

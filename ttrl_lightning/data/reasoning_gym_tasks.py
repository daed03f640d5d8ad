"""reasoning-gym's procedural generators as a question source: ``task: reasoning_gym:<name>`` (106 generators
with difficulty settings, a seed and their own ``score_answer``; extra ``real-model``).

``reasoning_gym_questions(name, n, seed, **config)`` draws ``reasoning_gym.create_dataset(name, size=n,
seed=seed, **config)`` into the question shape of ``data.questions`` (``prompt`` = the entry's question,
``gold`` = its answer, ids ``rg-<name>-<seed>-<i>``). The generator's scorer is the independent check of
gold: :func:`score_answers` scores extracted answers with ``score_answer`` (right when it gives 1.0), and
:func:`gold_check` counts where that and the project's answer equivalence disagree, so a disagreement is
reported, never hidden.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Sequence

from ..answers import NO_ANSWER, answers_equal
from ..errors import UserError

__all__ = ["PREFIX", "is_reasoning_gym", "reasoning_gym_name", "reasoning_gym_questions", "score_answers",
           "gold_check", "sampled_gold_check"]

PREFIX = "reasoning_gym:"


def is_reasoning_gym(task: str | None) -> bool:
    return isinstance(task, str) and task.startswith(PREFIX)


def reasoning_gym_name(task: str) -> str:
    name = task[len(PREFIX):]
    if not name:
        raise UserError(f"task {task!r}: name a reasoning-gym generator after {PREFIX!r} (e.g. "
                        f"{PREFIX}chain_sum)")
    return name


def _module():
    try:
        import reasoning_gym
    except ImportError:
        raise UserError("task reasoning_gym:<name> needs the reasoning-gym package (the extra real-model: "
                        "pip install 'ttrl_lightning[real-model]')") from None
    return reasoning_gym


@lru_cache(maxsize=16)
def _dataset(name: str, n: int, seed: int, config_json: str):
    rg = _module()
    known = sorted(rg.factory.DATASETS)
    if name not in known:
        raise UserError(f"unknown reasoning-gym generator {name!r}; known: {', '.join(known)}")
    try:
        return rg.create_dataset(name, size=n, seed=seed, **json.loads(config_json))
    except (TypeError, ValueError, AssertionError) as err:
        raise UserError(f"reasoning-gym {name}: bad config {config_json} ({err})") from None


def dataset(task: str, n: int, seed: int, **config):
    """The reasoning-gym dataset behind ``task`` (cached: the questions and the scorer share it)."""
    return _dataset(reasoning_gym_name(task), int(n), int(seed), json.dumps(config, sort_keys=True))


def reasoning_gym_questions(task: str, n: int, seed: int, **config) -> list[dict]:
    """``n`` questions of generator ``task`` (``reasoning_gym:<name>``) drawn with ``seed`` and ``config``."""
    ds = dataset(task, n, seed, **config)
    name = reasoning_gym_name(task)
    return [{"id": f"rg-{name}-{seed}-{i}", "prompt": str(entry["question"]), "gold": str(entry["answer"]),
             "choices": None, "images": [], "reframed_prompt": None} for i, entry in enumerate(ds)]


def score_answers(task: str, n: int, seed: int, answers: Sequence[Sequence[str | None]],
                  **config) -> list[list[bool]]:
    """Per question, per sample: whether the generator's ``score_answer`` gives the answer 1.0 (an
    unextractable answer, None, is wrong)."""
    ds = dataset(task, n, seed, **config)
    if len(answers) != len(ds):
        raise ValueError(f"{len(answers)} questions' answers for {len(ds)} generated questions")
    return [[a is not None and float(ds.score_answer(a, ds[q])) >= 1.0 for a in row]
            for q, row in enumerate(answers)]


def gold_check(project: Sequence[Sequence[bool]], generator: Sequence[Sequence[bool]]) -> dict[str, Any]:
    """The two gold checks side by side: samples, the share each calls right, and the disagreements (the
    project right, the scorer wrong, and the reverse)."""
    pairs = [(a, b) for pr, ge in zip(project, generator) for a, b in zip(pr, ge)]
    total = len(pairs)
    return {"samples": total,
            "project_accuracy": sum(a for a, _ in pairs) / total if total else None,
            "score_answer_accuracy": sum(b for _, b in pairs) / total if total else None,
            "project_only": sum(a and not b for a, b in pairs),
            "score_answer_only": sum(b and not a for a, b in pairs)}


def sampled_gold_check(task: str, n: int, seed: int, per_question: Sequence[dict], **config) -> dict[str, Any]:
    """:func:`gold_check` of sampled answers: ``per_question`` is ``eval.sampled.SampledMetrics.per_question``
    (each with ``gold`` and the extracted ``answers``) of the ``n`` questions of ``task`` drawn with ``seed`` and
    ``config``; the project's side is answer equivalence with gold, the generator's ``score_answer``."""
    project = [[a != NO_ANSWER and answers_equal(a, pq["gold"]) for a in pq["answers"]] for pq in per_question]
    scorer = score_answers(task, n, seed, [[None if a == NO_ANSWER else a for a in pq["answers"]]
                                           for pq in per_question], **config)
    return gold_check(project, scorer)

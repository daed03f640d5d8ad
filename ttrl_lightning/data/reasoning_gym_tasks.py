"""reasoning-gym's procedural generators as a question source: ``task: reasoning_gym:<name>`` (106 generators
with difficulty settings, a seed and their own ``score_answer``; extra ``real-model``).

``reasoning_gym_questions(name, n, seed, **config)`` draws ``reasoning_gym.create_dataset(name, size=n,
seed=seed, **config)`` into the question shape of ``data.questions`` (``prompt`` = the entry's question,
``gold`` = its answer, ids ``rg-<name>-<seed>-<i>``). The generator's scorer is the independent check of
gold: :func:`score_answers` scores extracted answers with ``score_answer`` against each question's own entry
(found from its id, so a question drawn anywhere in the stream is scored right; right when it gives 1.0), and
:func:`gold_check` counts where that and the project's answer equivalence disagree, so a disagreement is
reported, never hidden.
"""
from __future__ import annotations

import json
import re
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


#: a numeric setting of a reasoning-gym generator may be at most this many times the largest of the generator's
#: own default settings (and never less than :data:`SETTING_FLOOR`): ``min_terms: 1000000`` for ``chain_sum``
#: (defaults 2..6) drew one expression of a million terms per question, GBs, while a question file's record
#: was read again
SETTING_SCALE = 10
SETTING_FLOOR = 100
#: the most items of a list setting
SETTING_ITEMS = 1000


def setting_bound(name: str) -> float:
    """The largest magnitude a numeric setting of generator ``name`` may have (:data:`SETTING_SCALE` times its
    largest default setting, ``size`` and ``seed`` aside, at least :data:`SETTING_FLOOR`)."""
    import dataclasses

    cfg = _module().factory.DATASETS[name][1]
    largest = 0.0
    for f in dataclasses.fields(cfg) if dataclasses.is_dataclass(cfg) else ():
        if f.name in ("size", "seed"):
            continue
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            try:
                default = f.default_factory()
            except Exception:  # noqa: BLE001 - a default that cannot be built says nothing about the scale
                continue
        values = default if isinstance(default, (list, tuple)) else [default]
        for v in values:
            if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < float("inf"):
                largest = max(largest, abs(float(v)))
    return max(float(SETTING_FLOOR), SETTING_SCALE * largest)


def check_config_bounds(name: str, config: dict) -> None:
    """Refuse, in one line, a setting of generator ``name`` outside what it can draw in bounded time and memory:
    a number (in a list too) larger in magnitude than :func:`setting_bound`, not finite, or a list of more than
    :data:`SETTING_ITEMS` items. Checked where a config is read (every draw, and a question file's ``generator``
    record), before the generator is built."""
    bound = setting_bound(name)

    def check(key: str, value) -> None:
        if isinstance(value, (list, tuple, dict)):
            if len(value) > SETTING_ITEMS:
                raise UserError(f"reasoning-gym {name}: config {key} has {len(value):,} items, more than "
                                f"{SETTING_ITEMS:,}")
            for item in (value.values() if isinstance(value, dict) else value):
                check(key, item)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if not abs(value) <= bound:  # NaN too; an int of any size compares without overflow
                big = isinstance(value, int) and value.bit_length() > 128  # str() of 5,000 digits raises
                shown = f"an integer of {value.bit_length():,} bits" if big else repr(value)
                raise UserError(f"reasoning-gym {name}: config {key} must be within +-{bound:,.0f} ({SETTING_SCALE} "
                                f"times the generator's largest default setting), got {shown}")

    for key, value in config.items():
        check(str(key), value)


def known_generator(name: str) -> bool:
    """Whether reasoning-gym is installed here and has generator ``name``."""
    try:
        return name in _module().factory.DATASETS
    except UserError:
        return False


@lru_cache(maxsize=16)
def _dataset(name: str, n: int, seed: int, config_json: str):
    rg = _module()
    known = sorted(rg.factory.DATASETS)
    if name not in known:
        raise UserError(f"unknown reasoning-gym generator {name!r}; known: {', '.join(known)}")
    check_config_bounds(name, json.loads(config_json))
    try:
        ds = rg.create_dataset(name, size=n, seed=seed, **json.loads(config_json))
    except (TypeError, ValueError, AssertionError) as err:
        raise UserError(f"reasoning-gym {name}: bad config {config_json} ({err})") from None
    _check_config_types(name, ds, json.loads(config_json))
    return ds


def _check_config_types(name: str, ds, config: dict) -> None:
    """Refuse a config value of the wrong type for its field of the generator's config dataclass (an
    ``int`` field given ``2.5``): reasoning-gym does not check, and the draw failed later with a traceback from
    ``random.randrange``."""
    import dataclasses

    cfg = getattr(ds, "config", None)
    if cfg is None or not dataclasses.is_dataclass(cfg):
        return
    kinds = {f.name: f.type for f in dataclasses.fields(cfg)}
    for key, value in config.items():
        kind = kinds.get(key)
        kind = getattr(kind, "__name__", kind)
        if kind in ("int", int) and (isinstance(value, bool) or not isinstance(value, int)):
            raise UserError(f"reasoning-gym {name}: config {key} must be an integer, got {value!r}")
        if kind in ("float", float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UserError(f"reasoning-gym {name}: config {key} must be a number, got {value!r}")


def dataset(task: str, n: int, seed: int, **config):
    """The reasoning-gym dataset behind ``task`` (cached: the questions and the scorer share it)."""
    return _dataset(reasoning_gym_name(task), int(n), int(seed), json.dumps(config, sort_keys=True))


def reasoning_gym_questions(task: str, n: int, seed: int, **config) -> list[dict]:
    """``n`` questions of generator ``task`` (``reasoning_gym:<name>``) drawn with ``seed`` and ``config``."""
    ds = dataset(task, n, seed, **config)
    name = reasoning_gym_name(task)
    try:
        entries = list(ds)
    except (TypeError, ValueError, AssertionError, IndexError, KeyError) as err:  # a config it cannot draw with
        raise UserError(f"reasoning-gym {name}: cannot draw questions with config {json.dumps(config, sort_keys=True)}"
                        f" ({type(err).__name__}: {err})") from None
    return [{"id": f"rg-{name}-{seed}-{i}", "prompt": str(entry["question"]), "gold": str(entry["answer"]),
             "choices": None, "images": [], "reframed_prompt": None,
             "generator": {"task": task, "config": dict(config), "seed": int(seed), "index": i}}
            for i, entry in enumerate(entries)]


def _seed_and_index(task: str, question_id: str) -> tuple[int, int]:
    """The seed and index a question id of :func:`reasoning_gym_questions` names (``rg-<name>-<seed>-<i>``)."""
    name = reasoning_gym_name(task)
    m = re.fullmatch(rf"rg-{re.escape(name)}-(\d+)-(\d+)", str(question_id))
    if m is None:
        raise UserError(f"question id {question_id!r} is not one of reasoning-gym {name}'s (rg-{name}-<seed>-<i>), "
                        "so its generator entry is unknown")
    return int(m.group(1)), int(m.group(2))


def score_answers(task: str, ids: Sequence[str], answers: Sequence[Sequence[str | None]],
                  errors: list | None = None, entries: Sequence[tuple[int, int]] | None = None,
                  **config) -> list[list[bool]]:
    """Per question, per sample: whether the generator's ``score_answer`` gives the answer 1.0 (an
    unextractable answer, None, is wrong), against the question's own entry: its id names the seed and the index,
    and reasoning-gym draws item ``i`` of seed ``s`` from ``Random(s + i)`` whatever the dataset's size, so one
    dataset per seed, as long as the largest index, holds every entry. A scorer that raises on an answer (as
    ``prime_factorization`` does on ``433.0``) counts it as wrong and never stops the caller; ``errors``, when
    given, receives ``(question id, answer, "<Error>: <message>")`` for each. ``entries``: each question's
    ``(seed, index)`` (a question file's ``generator``), instead of reading them from the ids."""
    if len(answers) != len(ids):
        raise ValueError(f"{len(answers)} questions' answers for {len(ids)} question ids")
    where = list(entries) if entries is not None else [_seed_and_index(task, qid) for qid in ids]
    last: dict[int, int] = {}
    for seed, index in where:
        last[seed] = max(last.get(seed, 0), index)
    sets = {seed: dataset(task, index + 1, seed, **config) for seed, index in last.items()}

    def right(qid: str, seed: int, index: int, answer: str | None) -> bool:
        if answer is None:
            return False
        try:
            return float(sets[seed].score_answer(answer, sets[seed][index])) >= 1.0
        except Exception as err:  # noqa: BLE001 - a generator's scorer may raise anything on model output
            if errors is not None:
                errors.append((qid, answer, f"{type(err).__name__}: {str(err)[:200]}"))
            return False

    return [[right(qid, seed, index, a) for a in row] for qid, (seed, index), row in zip(ids, where, answers)]


def gold_check(project: Sequence[Sequence[bool]], generator: Sequence[Sequence[bool]],
               scorer_errors: int = 0) -> dict[str, Any]:
    """The two gold checks side by side: samples, the share each calls right, the disagreements (the
    project right, the scorer wrong, and the reverse) and ``scorer_errors``, the answers on which the scorer
    raised (counted as wrong by it)."""
    pairs = [(a, b) for pr, ge in zip(project, generator) for a, b in zip(pr, ge)]
    total = len(pairs)
    return {"samples": total,
            "project_accuracy": sum(a for a, _ in pairs) / total if total else None,
            "score_answer_accuracy": sum(b for _, b in pairs) / total if total else None,
            "project_only": sum(a and not b for a, b in pairs),
            "score_answer_only": sum(b and not a for a, b in pairs), "scorer_errors": scorer_errors}


def _project_and_scorer(task: str, per_question: Sequence[dict], errors: list,
                        entries: Sequence[tuple[int, int]] | None = None, **config):
    project = [[a != NO_ANSWER and answers_equal(a, pq["gold"]) for a in pq["answers"]] for pq in per_question]
    scorer = score_answers(task, [pq["id"] for pq in per_question],
                           [[None if a == NO_ANSWER else a for a in pq["answers"]] for pq in per_question],
                           errors=errors, entries=entries, **config)
    return project, scorer


def sampled_gold_check(task: str, per_question: Sequence[dict], **config) -> dict[str, Any]:
    """:func:`gold_check` of sampled answers: ``per_question`` is ``eval.sampled.SampledMetrics.per_question``
    (each with the question's ``id``, ``gold`` and the extracted ``answers``) of questions of ``task`` drawn
    with ``config``; the project's side is answer equivalence with gold, the generator's ``score_answer``."""
    errors: list = []
    project, scorer = _project_and_scorer(task, per_question, errors, **config)
    return gold_check(project, scorer, scorer_errors=len(errors))


def generator_gold_check(per_question: Sequence[dict], generators: Sequence[dict | None]) -> dict[str, Any] | None:
    """:func:`gold_check` of the sampled answers of the questions whose ``generator`` (a question file's field)
    is a reasoning-gym generator, each scored against its own entry (task, config, seed and index); None when
    no question has one. ``generators[q]`` belongs to ``per_question[q]``."""
    groups: dict[tuple[str, str], list[int]] = {}
    for q, gen in enumerate(generators):
        if gen is not None and is_reasoning_gym(gen["task"]):
            groups.setdefault((gen["task"], json.dumps(gen["config"], sort_keys=True)), []).append(q)
    if not groups:
        return None
    project: list = []
    scorer: list = []
    errors: list = []
    for (task, config), members in groups.items():
        p, s = _project_and_scorer(task, [per_question[q] for q in members], errors,
                                   entries=[(generators[q]["seed"], generators[q]["index"]) for q in members],
                                   **json.loads(config))
        project += p
        scorer += s
    out = gold_check(project, scorer, scorer_errors=len(errors))
    out["generators"] = sorted(task for task, _ in groups)
    out["questions"] = sum(len(m) for m in groups.values())
    return out

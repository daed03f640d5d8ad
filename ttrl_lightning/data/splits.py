"""Disjoint question splits by construction: one pool of distinct questions per source, cut into named splits.

Why: the sources are seeded streams, and two seeds of one stream are not two samples of it. reasoning-gym seeds
item ``i`` with ``Random(seed + i)``, so the questions drawn with seed 2 are those of seed 1 shifted by one index;
a small task (``chain_sum`` with two one-digit terms: 200 distinct prompts) repeats itself within one seed; the
generated tasks (:mod:`.tasks`) and scenes (:mod:`.scenes`) repeat too. A split drawn "with another seed" can
hold the very questions another split trains on, and a number measured on it is silently wrong.

So every split of one source comes from one stream (one seed), read in order: a question whose key
(:func:`question_key`) was already taken -- by an earlier question of the stream, by an excluded file, or by a
split of another source -- is skipped, and the distinct questions left are cut into the splits in the order they
are named. The stream is read until the splits are filled; a source that stops giving new questions (the last
``patience`` draws added none; by default max(1000, 16 x the questions needed), at most
:data:`MAX_PATIENCE`, so a split far larger than its task is refused in seconds) is refused with one line that
says how many distinct questions it gave (:class:`SplitError`). Streams are prefix-stable (the first ``n``
items of a longer draw are the items of a draw of ``n``), so a split's questions do not depend on how far the
stream had to be read.

The key of a question is the question itself, not its wrapping: for a question that names the generator that
drew it (the ``generator`` record of a question file: task, config, seed, index), the prompt that generator gives,
read again from it (:func:`problem_text`), so an ``--instruction`` appended to the prompt, a chat template put
around it, or neither, give one key; for any other question its prompt. The text is normalised (Unicode NFKC,
case-folded, runs of white space as one space, stripped), and, for a question with images, the SHA-256 of each
image's pixels is added: two scene questions with one wording and different pictures are two questions, and a
scene saved as PNG is the array it was drawn from. A question without a generator record is keyed on its prompt
as written: an instruction or a template written into it by hand makes another key.

"Distinct" is a distinct prompt, not a distinct problem: ``12+7=`` and ``7+12=``, or one ``chain_sum``
expression in two of reasoning-gym's wordings, are two questions here (docs/evaluation.md gives the counts of
such twins in the shipped benchmarks' splits).

    splits = draw_splits([SplitSpec("train", 24, source), SplitSpec("held_out", 16, source)])
    overlaps(splits)          # {("train", "held_out"): 0}
"""
from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import UserError

__all__ = ["SplitError", "QuestionSource", "SplitSpec", "question_key", "prompt_key", "problem_text",
           "generated_prompt", "remember_generated", "draw_splits", "distinct_questions", "overlaps", "overlap_table",
           "keys_of"]

_SPACE = re.compile(r"\s+")
#: the most draws in a row without a new question before a source counts as exhausted (the default patience's
#: cap: ``ttrl questions --n 1000000`` on a task of 10,000 questions drew 16 million first)
MAX_PATIENCE = 20_000


class SplitError(UserError):
    """A split cannot be filled with questions no other split holds; the message says how many the source has."""


def prompt_key(text: str) -> str:
    """A prompt as compared across splits: NFKC, case-folded, white space collapsed, stripped."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


#: the prompts each generator stream gave, as it gave them (no instruction, no template), in stream order:
#: ``(task, config JSON, seed) -> [prompt of item 0, 1, ...]``; streams are prefix-stable, so a longer draw
#: extends a shorter one
_GENERATED: dict[tuple[str, str, int], list[str]] = {}
_GENERATED_STREAMS = 64


def _stream_id(generator: Mapping[str, Any]) -> tuple[str, str, int]:
    import json

    return (str(generator["task"]), json.dumps(generator["config"], sort_keys=True, default=str),
            int(generator["seed"]))


def remember_generated(questions: Sequence[Mapping[str, Any]]) -> None:
    """Keep the prompts of freshly generated questions (each with its ``generator`` record, its ``prompt`` as the
    generator gave it, items ``0..n-1`` of one stream), so that :func:`generated_prompt` need not draw them
    again."""
    if not questions or questions[0].get("generator") is None:
        return
    sid = _stream_id(questions[0]["generator"])
    if len(questions) > len(_GENERATED.get(sid, ())):
        if sid not in _GENERATED and len(_GENERATED) >= _GENERATED_STREAMS:
            _GENERATED.pop(next(iter(_GENERATED)))
        _GENERATED[sid] = [str(q["prompt"]) for q in questions]


def generated_prompt(generator: Mapping[str, Any]) -> str | None:
    """The prompt item ``generator["index"]`` of the ``generator`` record's stream has as its generator gives it
    (a task of :mod:`.tasks` or a reasoning-gym generator); None when the task is not one of those here or its
    config cannot draw."""
    from .reasoning_gym_tasks import is_reasoning_gym, reasoning_gym_questions
    from .tasks import TASKS, generate_prompts

    task, index = str(generator.get("task")), generator.get("index")
    if not isinstance(index, int) or index < 0 or not (task in TASKS or is_reasoning_gym(task)):
        return None
    sid = _stream_id(generator)
    known = _GENERATED.get(sid, ())
    if index >= len(known):
        draw = reasoning_gym_questions if is_reasoning_gym(task) else generate_prompts
        try:  # draws the stream up to twice as far (the next index asked for is likely further on)
            drawn = draw(task, max(2 * index + 1, 64), sid[2], **dict(generator["config"]))
        except (KeyError, TypeError, ValueError):  # a config this version cannot draw: keyed on its prompt
            return None
        remember_generated([{"prompt": q["prompt"], "generator": generator} for q in drawn])
        known = _GENERATED.get(sid, ())
    return known[index] if index < len(known) else None


def problem_text(question: Mapping[str, Any]) -> str:
    """The question as its generator gave it: :func:`generated_prompt` of its ``generator`` record when that
    prompt is in the question's prompt (which may add an instruction after it or a chat template around it),
    else the prompt as written (no record, a task unknown here, or a prompt edited since it was drawn)."""
    prompt = str(question["prompt"])
    generator = question.get("generator")
    if generator:
        raw = generated_prompt(generator)
        if raw is not None and prompt_key(raw) in prompt_key(prompt):
            return raw
    return prompt


def _image_digest(image: Any) -> str:
    """SHA-256 of an image's pixels (mode, size and bytes, read with PIL), whether it is a file's path, a PIL
    image or an ``[H, W, C]`` uint8 array (data.scenes' pixels): a scene saved as PNG and the array it was
    drawn from have one digest."""
    from PIL import Image

    if isinstance(image, str):
        with Image.open(image) as im:
            im.load()
            return _image_digest(im)
    if not isinstance(image, Image.Image):
        import numpy as np

        image = Image.fromarray(np.ascontiguousarray(image))
    h = hashlib.sha256(f"{image.mode}{image.size}".encode())
    h.update(image.tobytes())
    return h.hexdigest()


def question_key(question: Mapping[str, Any]) -> str:
    """The identity of a question across splits: :func:`prompt_key` of :func:`problem_text` (the prompt as its
    generator gave it, without an appended instruction or a chat template; the prompt itself for a question
    without a generator record), plus the digest of each of its ``images`` (paths, arrays or PIL images) when it
    has any."""
    key = prompt_key(problem_text(question))
    images = question.get("images") or ()
    if images:
        key += "\x00" + "\x00".join(_image_digest(im) for im in images)
    return key


def keys_of(questions: Iterable[Mapping[str, Any]]) -> set[str]:
    """The :func:`question_key` of every question (an excluded file's, a split's)."""
    return {question_key(q) for q in questions}


@dataclass(frozen=True)
class QuestionSource:
    """A seeded, prefix-stable question stream: ``draw(n)`` gives its first ``n`` questions.

    ``name`` says what it is in messages (``"reasoning_gym:chain_sum (seed 0)"``); two specs with equal sources
    are cut from one pool. ``key`` identifies a question (:func:`question_key` by default)."""

    name: str
    draw: Callable[[int], Sequence[dict]] = field(compare=False)
    identity: tuple = ()
    key: Callable[[Mapping[str, Any]], str] = field(default=question_key, compare=False)


@dataclass(frozen=True)
class SplitSpec:
    """A named split: ``size`` distinct questions of ``source``."""

    name: str
    size: int
    source: QuestionSource


def _distinct(source: QuestionSource, need: int, taken: set[str], patience: int | None) -> tuple[list[dict], int]:
    """The first ``need`` questions of ``source``'s stream whose key is not in ``taken`` (nor repeated), and how
    many items were read; fewer when the stream stops giving new questions for ``patience`` draws."""
    patience = patience if patience is not None else max(1000, min(16 * need, MAX_PATIENCE))
    found: list[dict] = []
    seen = set(taken)
    read, since_new, batch = 0, 0, min(max(2 * need, 64), 1024)
    while len(found) < need and since_new < patience:
        items = source.draw(read + batch)
        if len(items) <= read:  # a finite source is exhausted
            break
        for q in itertools.islice(items, read, None):
            read += 1
            k = source.key(q)
            if k in seen:
                since_new += 1
                if since_new >= patience:
                    break
                continue
            seen.add(k)
            found.append(q)
            since_new = 0
            if len(found) == need:
                break
        batch *= 2
    return found, read


def distinct_questions(source: QuestionSource, limit: int, exclude: Iterable[str] = (), patience: int | None = None
                       ) -> list[dict]:
    """The distinct questions ``source`` gives (not in ``exclude``), in stream order, at most ``limit``: read
    until there are ``limit`` or the last ``patience`` draws (default 1000) added none -- how many questions a
    small task holds."""
    return _distinct(source, limit, set(exclude), patience if patience is not None else 1000)[0]


def draw_splits(specs: Sequence[SplitSpec], exclude: Iterable[str] = (), patience: int | None = None
                ) -> dict[str, list[dict]]:
    """The splits of ``specs``, pairwise disjoint by :func:`question_key` and disjoint from the keys in
    ``exclude``: the specs of one source are cut, in order, from one pool of its distinct questions; a source
    named later skips the questions every earlier split took. Raises :class:`SplitError` (one line: the
    source, the distinct questions it gave, what the splits need) when a pool cannot be filled, and
    ``ValueError`` for a repeated split name or a size < 1."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"split names must be distinct, got {names}")
    for s in specs:
        if isinstance(s.size, bool) or not isinstance(s.size, int) or s.size < 1:
            raise ValueError(f"split {s.name!r}: size must be an integer >= 1, got {s.size!r}")
    taken = set(exclude)
    excluded = len(taken)
    out: dict[str, list[dict]] = {}
    for source in dict.fromkeys(s.source for s in specs):
        mine = [s for s in specs if s.source == source]
        need = sum(s.size for s in mine)
        pool, read = _distinct(source, need, taken, patience)
        if len(pool) < need:
            wanted = ", ".join(f"{s.name} {s.size}" for s in mine)
            other = len(taken) - excluded
            besides = [f"{other} of the other splits" if other else "", f"{excluded} excluded" if excluded else ""]
            besides = " and ".join(b for b in besides if b)
            raise SplitError(f"{source.name}: {len(pool)} distinct questions found in {read} draws"
                             + (f" (besides the {besides} ones)" if besides else "")
                             + f", but the splits need {need} ({wanted}); ask for fewer questions or use a "
                             "larger task")
        start = 0
        for s in mine:
            out[s.name] = list(pool[start:start + s.size])
            start += s.size
        taken.update(source.key(q) for q in pool)
    return {name: out[name] for name in names}


def overlaps(splits: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[tuple[str, str], int]:
    """Questions shared by each pair of splits, by :func:`question_key`: ``{(a, b): count}`` for a before b."""
    keys = {name: keys_of(qs) for name, qs in splits.items()}
    names = list(keys)
    return {(a, b): len(keys[a] & keys[b]) for i, a in enumerate(names) for b in names[i + 1:]}


def overlap_table(splits: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Each split's size and every pairwise overlap, as lines a command prints."""
    lines = [f"  {name}: {len(qs)} questions ({len(keys_of(qs))} distinct)" for name, qs in splits.items()]
    lines += [f"  overlap {a} / {b}: {n}" for (a, b), n in overlaps(splits).items()]
    return "\n".join(lines)

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
as written: an instruction or a template written into it by hand makes another key. A record counts only when the
question's prompt is the regenerated prompt or wraps it (:func:`wraps`); a record of another item (``69+87=``
carrying the record of ``9+87=``) is ignored and the question keyed on its own text, so a file holding
``69+87=`` overlaps it. Reading a record again is bounded: its index (:data:`MAX_GENERATOR_INDEX`), its settings
(checked where a question file is read) and the time to draw (:data:`GENERATOR_SECONDS`).

"Distinct" is a distinct problem, not a distinct prompt: the key reads the text's sums and products in one order
of their terms (:func:`problem_key`), so ``12+7=`` and ``7+12=``, or reasoning-gym's ``5 + 7`` and ``7 + 5``, are one
question, and a split, an excluded file or an SFT run's exclusion that holds one holds its reordered twin (a twin
answered in training gives the answer away: the fused format teaches the swap). Signs stay with their terms
(``5 - 7`` is ``-7 + 5``, not ``7 - 5``). One expression in two wordings is still two questions
(``benchmarks/training/split_twins.py`` counts both kinds in the shipped studies' splits).

    splits = draw_splits([SplitSpec("train", 24, source), SplitSpec("held_out", 16, source)])
    overlaps(splits)          # {("train", "held_out"): 0}
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import UserError

__all__ = ["SplitError", "QuestionSource", "SplitSpec", "question_key", "problem_key", "prompt_key", "problem_text",
           "generated_prompt", "remember_generated", "wraps", "check_generator_index", "MAX_GENERATOR_INDEX", "draw_splits", "distinct_questions", "overlaps", "overlap_table",
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


#: the largest ``index`` of a ``generator`` record: an item further on is not drawn again (a record with
#: ``"index": 200000000`` drew the stream up to it, GBs and minutes), and a generated stream is not read past it
#: (:func:`.questions.task_source`), so every question file ``ttrl questions`` writes reads back
MAX_GENERATOR_INDEX = 100_000
#: the longest a stream may take to be drawn again up to a record's item, a bound besides the settings' own
#: (:mod:`.tasks`, :func:`.reasoning_gym_tasks.check_config_bounds`)
GENERATOR_SECONDS = 60.0

#: the prompts each generator stream gave, as it gave them (no instruction, no template), in stream order:
#: ``(task, config JSON, seed) -> [prompt of item 0, 1, ...]``; streams are prefix-stable, so a longer draw
#: extends a shorter one. At most :data:`_GENERATED_STREAMS` streams and :data:`_GENERATED_PROMPTS` prompts are
#: kept (the oldest streams go first)
_GENERATED: dict[tuple[str, str, int], list[str]] = {}
_GENERATED_STREAMS = 64
_GENERATED_PROMPTS = 1_000_000
#: single items of reasoning-gym streams, drawn alone (item ``i`` is drawn from ``Random(seed + i)``):
#: ``(task, config JSON, seed, index) -> prompt``
_ITEMS: dict[tuple[str, str, int, int], str] = {}
#: the streams whose config cannot draw here (a record of one is keyed on its prompt), not tried again
_UNDRAWABLE: set[tuple[str, str, int]] = set()


def _stream_id(generator: Mapping[str, Any]) -> tuple[str, str, int]:
    import json

    return (str(generator["task"]), json.dumps(generator["config"], sort_keys=True, default=str),
            int(generator["seed"]))


def _keep(sid: tuple[str, str, int], prompts: list[str]) -> None:
    """Keep ``prompts`` as stream ``sid``'s, dropping the oldest streams past the caps."""
    _GENERATED.pop(sid, None)
    while _GENERATED and (len(_GENERATED) >= _GENERATED_STREAMS
                          or sum(map(len, _GENERATED.values())) + len(prompts) > _GENERATED_PROMPTS):
        _GENERATED.pop(next(iter(_GENERATED)))
    _GENERATED[sid] = prompts


def remember_generated(questions: Sequence[Mapping[str, Any]]) -> None:
    """Keep the prompts of freshly generated questions (each with its ``generator`` record, its ``prompt`` as the
    generator gave it, items ``0..n-1`` of one stream), so that :func:`generated_prompt` need not draw them
    again. Only the first :data:`MAX_GENERATOR_INDEX` + 1 items are kept, the most a record names."""
    if not questions or questions[0].get("generator") is None:
        return
    sid = _stream_id(questions[0]["generator"])
    if len(questions) > len(_GENERATED.get(sid, ())):
        _keep(sid, [str(q["prompt"]) for q in questions[:MAX_GENERATOR_INDEX + 1]])


def check_generator_index(index: int, where: str = "generator record") -> None:
    """One ``UserError`` naming ``where`` and the cap for an index past :data:`MAX_GENERATOR_INDEX`."""
    if index > MAX_GENERATOR_INDEX:
        raise UserError(f"{where}: index {index:,} is past the last item a generator's stream is read to "
                        f"({MAX_GENERATOR_INDEX:,}, data.splits.MAX_GENERATOR_INDEX)")


def generated_prompt(generator: Mapping[str, Any]) -> str | None:
    """The prompt item ``generator["index"]`` of the ``generator`` record's stream has as its generator gives it
    (a task of :mod:`.tasks` or a reasoning-gym generator); None when the task is not one of those here or its
    config cannot draw. Bounded: an index past :data:`MAX_GENERATOR_INDEX` is one ``UserError``; a
    reasoning-gym item is drawn alone (its generator seeds item ``i`` with ``seed + i``), a task of :mod:`.tasks`
    from the start of its stream, at most :data:`MAX_GENERATOR_INDEX` + 1 items, and a draw that takes longer
    than :data:`GENERATOR_SECONDS` is one ``UserError``; the settings are bounded where the generators read
    them."""
    from .reasoning_gym_tasks import is_reasoning_gym
    from .tasks import TASKS

    task, index = str(generator.get("task")), generator.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0 \
            or not (task in TASKS or is_reasoning_gym(task)):
        return None
    check_generator_index(index, f"generator record of task {task}")
    sid = _stream_id(generator)
    known = _GENERATED.get(sid, ())
    if index < len(known):
        return known[index]
    if sid in _UNDRAWABLE:
        return None
    with _draw_time(task, index):  # its timeout is a BaseException: not taken for a config that cannot draw
        try:
            if is_reasoning_gym(task):
                return _reasoning_gym_item(sid, index, dict(generator["config"]))
            from .tasks import generate_prompts

            # the stream up to twice as far (the next index asked for is likely further on), within the cap
            n = min(max(2 * index + 1, 64), MAX_GENERATOR_INDEX + 1)
            _keep(sid, [q["prompt"] for q in generate_prompts(task, n, sid[2], **dict(generator["config"]))])
        except (KeyError, TypeError, ValueError):  # a config this version cannot draw: keyed on its prompt
            if len(_UNDRAWABLE) < _GENERATED_PROMPTS:
                _UNDRAWABLE.add(sid)
            return None
    known = _GENERATED.get(sid, ())
    return known[index] if index < len(known) else None


@contextlib.contextmanager
def _draw_time(task: str, index: int):
    """:data:`GENERATOR_SECONDS` for drawing ``task``'s stream again up to ``index``, else one ``UserError``."""
    from ..answers.budget import ComparisonTimeout, time_limit

    try:
        with time_limit(GENERATOR_SECONDS):
            yield
    except ComparisonTimeout:
        raise UserError(f"generator record of task {task}: drawing its stream again up to item {index:,} took "
                        f"more than {GENERATOR_SECONDS:g} s (data.splits.GENERATOR_SECONDS); its settings draw "
                        "too slowly") from None


def _reasoning_gym_item(sid: tuple[str, str, int], index: int, config: dict) -> str:
    """Item ``index`` of a reasoning-gym stream, drawn alone from a dataset sized to the next power of two (so a
    file's items share a few datasets)."""
    from .reasoning_gym_tasks import dataset

    key = sid + (index,)
    if key not in _ITEMS:
        if len(_ITEMS) >= _GENERATED_PROMPTS:
            _ITEMS.clear()
        size = min(max(64, 1 << index.bit_length()), MAX_GENERATOR_INDEX + 1)
        try:
            entry = dataset(sid[0], size, sid[2], **config)[index]
        except (IndexError, AssertionError, ZeroDivisionError, AttributeError, RecursionError) as err:
            raise ValueError(f"{sid[0]}: cannot draw item {index}: {err}") from None
        _ITEMS[key] = str(entry["question"])
    return _ITEMS[key]


#: a chat template's markers, as :func:`prompt_key` writes them (case-folded): ``<|im_start|>``, ``<|user|>``,
#: ``<s>``, ``<start_of_turn>``, ``[INST]``, ``<<SYS>>``
_MARKER = r"(?:<\|[^<>|\s]{1,64}\|>|</?[a-z_][a-z0-9_.-]{0,63}>|\[/?inst\]|<</?sys>>)"
#: what a template puts right before a turn's text: a marker, then perhaps the role's name
_TURN_HEAD = re.compile(_MARKER + r"\s*(?:(?:user|human|system|assistant|model)\s*:?\s*)?$")
#: what may follow the question: nothing, the next marker, or an instruction (a sentence: a letter first) after
#: one space, as :func:`.questions.with_instruction` appends it
_TURN_TAIL = re.compile(r"\s*(?:$|" + _MARKER + r")| [^\W\d_]")
#: the most places of ``raw`` in a prompt that :func:`wraps` looks at (a template holds it once)
_WRAP_TRIES = 16


def wraps(prompt: str, raw: str) -> bool:
    """Whether ``prompt`` is the generated prompt ``raw`` itself or ``raw`` with a known wrapping: an instruction
    appended after one space (:func:`.questions.with_instruction`: the text after the space starts with a letter,
    so ``raw`` continued -- ``9+87= 5``, ``3 + 4 + 5`` for ``3 + 4`` -- is not one), a chat template around it
    (``raw`` right after a template marker, and perhaps a role name, and followed by the next marker or an
    instruction), or both. Compared as :func:`prompt_key` writes them. A prompt that only holds ``raw`` inside
    other text (``69+87=`` holds ``9+87=``) is not a wrapping."""
    p, r = prompt_key(prompt), prompt_key(raw)
    if not r:
        return p == r
    start, tries = p.find(r), 0
    while start >= 0 and tries < _WRAP_TRIES:
        before, after = p[:start], p[start + len(r):]
        if (not before or _TURN_HEAD.search(before[-256:])) and _TURN_TAIL.match(after):
            return True
        start, tries = p.find(r, start + 1), tries + 1
    return False


def problem_text(question: Mapping[str, Any]) -> str:
    """The question as its generator gave it: :func:`generated_prompt` of its ``generator`` record when the
    question's prompt is that prompt or wraps it (:func:`wraps`: an instruction after it, a chat template
    around it), else the prompt as written: no record, a task unknown here, or a record that is not this
    question's (a prompt edited since it was drawn, a record copied from another item) -- such a record is
    ignored, and the question is keyed on its own text."""
    prompt = str(question["prompt"])
    generator = question.get("generator")
    if generator:
        raw = generated_prompt(generator)
        if raw is not None and wraps(prompt, raw):
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


#: a number as an arithmetic expression writes it (a minus right before it is its sign)
_NUMBER = r"-?\d+(?:\.\d+)?"
#: an arithmetic expression: two or more numbers joined by ``+``, ``-``, ``*`` or ``×`` (as :func:`prompt_key`
#: writes the text: no white space runs)
_EXPRESSION = re.compile(rf"{_NUMBER}(?: ?[-+*×] ?{_NUMBER})+")
_TERM = re.compile(rf"([-+*×])? ?({_NUMBER})")
#: what may not touch an expression for its terms to be its own: before it, a word, a number's point, a closing
#: bracket or an operator (``x - 2 + 3`` is not a sum of 2 and 3); after it, a word, a point, an opening bracket or
#: an operator that binds tighter (``2 + 3 * x``, ``2 + 3 / 4``, ``2 + 3^2``)
_NOT_BEFORE = re.compile(r"[\w.)+\-*×/^] ?$")
_NOT_AFTER = re.compile(r" ?[\w.(*×/^]")


def _number(text: str):
    from decimal import Decimal

    value = Decimal(text)
    return value if value else Decimal(0)  # -0 is 0


def _written(value) -> str:
    return format(abs(value).normalize(), "f")


def _canonical(expr: str) -> str:
    """One writing of an expression for all orders of its terms: a sum's signed terms (signs kept with their
    terms: ``5 - 7`` is ``-7 + 5``, not ``7 - 5``) positive ones first, each group by size (``5-7``); a
    product's factors by size, its sign in front (``-2*3`` for ``3 * -2``). An expression that mixes a sum and a
    product is written as it is, white space removed (its order of evaluation is not read here)."""
    terms = _TERM.findall(expr)
    ops = {op for op, _ in terms[1:]}
    if ops <= {"+", "-"}:
        values = [(-1 if op == "-" else 1) * _number(num) for op, num in terms]
        ordered = sorted(v for v in values if v >= 0) + sorted((v for v in values if v < 0), reverse=True)
        out = "".join(("-" if v < 0 else "+") + _written(v) for v in ordered)
        return out[1:] if out.startswith("+") else out
    if ops <= {"*", "×"}:
        values = [(-1 if op == "-" else 1) * _number(num) for op, num in terms]
        negative = sum(v < 0 for v in values) % 2 == 1
        return ("-" if negative else "") + "*".join(_written(v) for v in sorted(values, key=abs))
    return expr.replace(" ", "")


def problem_key(text: str) -> str:
    """A prompt as one problem, whatever the order of its sums' and products' terms: :func:`prompt_key`, with
    every arithmetic expression in it (numbers joined by ``+ - * ×``, standing alone: not part of a longer
    expression with brackets, powers, division or letters) written in one order (:func:`_canonical`).
    ``12+7=`` and ``7+12=`` are one problem, ``... problem: 5 + 7 =`` and ``... problem: 7 + 5 =`` too, and
    ``5 - 7`` is ``-7 + 5`` but not ``7 - 5``. The words around an expression stay: one expression in two wordings
    is two keys."""
    text = prompt_key(text)
    out, end = [], 0
    for m in _EXPRESSION.finditer(text):
        if _NOT_BEFORE.search(text, max(0, m.start() - 2), m.start()) or _NOT_AFTER.match(text, m.end()):
            continue
        out += [text[end:m.start()], _canonical(m.group())]
        end = m.end()
    return "".join(out) + text[end:]


def question_key(question: Mapping[str, Any]) -> str:
    """The identity of a question across splits: :func:`problem_key` of :func:`problem_text` (the prompt as its
    generator gave it, without an appended instruction or a chat template; the prompt itself for a question
    without a generator record; its sums and products in one order of their terms), plus the digest of each of
    its ``images`` (paths, arrays or PIL images) when it has any."""
    key = problem_key(problem_text(question))
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

"""Question files and generated questions: the unlabeled test set of test-time RL and of ``ttrl eval``.

Question schema (one row per question, a JSONL line or a Parquet row)::

    {"id": str | int,                  # unique in the file; an integer id becomes its decimal string
     "prompt": str,                    # or "question" (exactly one of the two), non-empty
     "gold": str | int | null,         # optional; monitoring and evaluation only, never a training signal
     "choices": {letter: text} | null, # optional, multiple-choice options (answers.extract_answer)
     "image": str | [str] | null,      # optional image path(s), relative paths against the file's folder
     "reframed_prompt": str | null,    # optional, Self-Harmony's reframed view of the question
     "generator": {"task": str, "config": {...}, "seed": int, "index": int} | null}
                                       # optional, the generator that drew it (ttrl questions writes it), so a
                                       # command that reads the file knows its scorer (ttrl eval's gold check)

:func:`read_questions` returns dicts with the keys :data:`QUESTION_KEYS`: ``id``, ``prompt``, ``gold`` (None
when absent), ``choices`` (None), ``images`` (a list of absolute paths, ``[]`` when none) and
``reframed_prompt`` (None) and ``generator`` (None). It is strict as the rollout-pool reader is (:mod:`.pool`): the format follows
the file's content and name (``.parquet`` must be Parquet; any other name is JSONL and must not be Parquet
or gzip), and every bad row raises :class:`QuestionError` (a :class:`~ttrl_lightning.errors.UserError`:
one line, exit 1) naming the file, the row (``line N`` of a JSONL file counted from 1, ``row N`` of a
Parquet file counted from 0) and the field: a missing or empty prompt, both ``prompt`` and ``question``, a
duplicate id (both rows named), an image that is missing or that does not decode whole, or is out of bounds
(:mod:`.image_files`: aspect ratio, images and pixels per question), a column the
schema does not name, a value of the wrong type, bytes that are not UTF-8, a line that is not JSON.

:func:`questions_from_task` gives the generated tasks of :mod:`.tasks` in the same shape, and
:class:`QuestionDataModule` batches either source for training (TTRL's epochs over a fixed unlabeled set,
or Pixelis' online stream read once in file order).
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any, Iterable, Iterator

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from ..errors import UserError
from .loaders import EpochSeededSampler, ResumableDataLoader, collate_prompts
from .image_files import MAX_IMAGES_PER_QUESTION, MAX_PIXELS_PER_QUESTION, ImageFileError, check_image
from .pool_files import PARQUET_MAGIC, looks_like, parse_jsonl, parse_parquet
from .pool_schema import PoolError, value_kind
from .reasoning_gym_tasks import is_reasoning_gym, reasoning_gym_questions
from .splits import (MAX_GENERATOR_INDEX, QuestionSource, SplitError, SplitSpec, check_generator_index, draw_splits,
                     question_key, remember_generated)
from .tasks import generate_prompts

__all__ = ["QuestionError", "QUESTION_COLUMNS", "QUESTION_KEYS", "BATCH_KEYS", "read_questions",
           "questions_from_task", "task_source", "task_splits", "with_instruction", "write_questions",
           "collate_questions", "QuestionDataModule", "few_ids"]

#: The columns a question file may have (any other column is refused).
QUESTION_COLUMNS = ("id", "prompt", "question", "gold", "choices", "image", "reframed_prompt", "generator")
#: The keys of every question dict (:func:`read_questions`, :func:`questions_from_task`).
QUESTION_KEYS = ("id", "prompt", "gold", "choices", "images", "reframed_prompt", "generator")
#: The keys of a :class:`QuestionDataModule` batch (each a list over the batch's questions).
BATCH_KEYS = ("id", "prompt", "gold", "choices", "images", "reframed_prompt")
#: Columns users write for the gold answer under another name: the message suggests ``gold``.
_GOLD_SYNONYMS = ("answer", "label", "target", "solution")


class QuestionError(UserError):
    """A question file or row violates the schema; the message names the file, the row and the field."""


def _rows(path: str) -> Iterator[tuple[str, Any]]:
    """``(location, raw row)`` of a question file, format from name and content as the pool reader does."""
    if not os.path.exists(path):
        raise QuestionError(f"{path}: question file not found")
    if not os.path.isfile(path):
        raise QuestionError(f"{path}: not a file")
    with open(path, "rb") as fh:
        head = fh.read(16)
    if path.endswith(".parquet"):
        if not head.startswith(PARQUET_MAGIC):
            raise QuestionError(f"{path}: not a Parquet file: {looks_like(head)}")
        parsed = parse_parquet(path)
    elif head.startswith(PARQUET_MAGIC) or head.startswith(b"\x1f\x8b"):
        raise QuestionError(f"{path}: not a JSONL file: {looks_like(head)}")
    else:
        parsed = parse_jsonl(path)
    try:
        yield from parsed
    except PoolError as e:  # the pool reader's byte / JSON / Parquet errors, raised as a question error
        raise QuestionError(str(e)) from None


def _unicode(value: str, key: str, where: str) -> str:
    """``value`` when it is text: JSON's ``"\\ud800"`` escapes parse to lone surrogates, which no tokenizer
    or file can encode (a traceback deep in sampling)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise QuestionError(f"{where}: field {key!r} holds a lone surrogate ({value[e.start]!r} at character "
                            f"{e.start}), which is not text") from None
    return value


def _text(row: dict, key: str, where: str, required: bool = False) -> str | None:
    value = row.get(key)
    if value is None:
        if required:
            raise QuestionError(f"{where}: missing field {key!r}")
        return None
    if not isinstance(value, str):
        raise QuestionError(f"{where}: field {key!r} must be a string, got {value_kind(value)}")
    if not value.strip():
        raise QuestionError(f"{where}: field {key!r} is empty")
    return _unicode(value, key, where)


def _question_id(row: dict, where: str) -> str:
    qid = row.get("id")
    if qid is None:
        raise QuestionError(f"{where}: missing field 'id'")
    if isinstance(qid, bool) or not isinstance(qid, (str, int)):
        raise QuestionError(f"{where}: field 'id' must be a string or an integer, got {value_kind(qid)}")
    qid = str(qid)
    if not qid.strip():
        raise QuestionError(f"{where}: field 'id' is empty")
    return _unicode(qid, "id", where)


def _gold(row: dict, where: str) -> str | None:
    gold = row.get("gold")
    if gold is None:
        return None
    if isinstance(gold, bool) or not isinstance(gold, (str, int)):
        raise QuestionError(f"{where}: field 'gold' must be a string, an integer or null, got {value_kind(gold)} "
                            "(write a decimal or a fraction as a string)")
    gold = str(gold)
    if not gold.strip():
        raise QuestionError(f"{where}: field 'gold' is empty (leave it out or null when there is none)")
    return _unicode(gold, "gold", where)


def _generator(row: dict, where: str) -> dict | None:
    """The ``generator`` field: None, or ``{"task": str, "config": {...}, "seed": int >= 0, "index": int >= 0}``."""
    gen = row.get("generator")
    if gen is None:
        return None
    shape = ("field 'generator' must be an object {\"task\": str, \"config\": {...}, \"seed\": int, \"index\": "
             "int}")
    if not isinstance(gen, dict) or set(gen) != {"task", "config", "seed", "index"}:
        raise QuestionError(f"{where}: {shape}, got {value_kind(gen) if not isinstance(gen, dict) else sorted(gen)}")
    if not isinstance(gen["task"], str) or not gen["task"] or not isinstance(gen["config"], dict):
        raise QuestionError(f"{where}: {shape}")
    for key in ("seed", "index"):
        if isinstance(gen[key], bool) or not isinstance(gen[key], int) or gen[key] < 0:
            raise QuestionError(f"{where}: field 'generator': {key} must be an integer >= 0, got {gen[key]!r}")
    try:  # the record is drawn again (data.splits.question_key): bounded here, where it is read
        check_generator_index(gen["index"], f"{where}: field 'generator'")
        check_generator_config(gen["task"], gen["config"])
    except UserError as err:
        raise QuestionError(str(err) if str(err).startswith(where) else f"{where}: field 'generator': {err}") from None
    return dict(gen)


def check_generator_config(task: str, config: dict) -> None:
    """One ``UserError`` for a generator record's config outside the range its generator can draw from (the
    settings of :mod:`.tasks`, :func:`.reasoning_gym_tasks.check_config_bounds`). A task unknown here, a
    setting it does not have, or reasoning-gym not installed pass: such a record is not drawn again, and the
    question is keyed on its prompt (:func:`.splits.problem_text`)."""
    import json

    _checked_config(task, json.dumps(config, sort_keys=True, default=str))


@lru_cache(maxsize=256)
def _checked_config(task: str, config_json: str) -> None:
    import json

    from .tasks import TASKS, make_task

    config = json.loads(config_json)
    if task in TASKS:
        try:
            make_task(task, **config)
        except TypeError:  # a setting this version does not have: not drawn again
            return
        except KeyError as err:  # a name a registry does not hold (reframing)
            raise UserError(f"{task}: config: {err.args[0] if err.args else err}") from None
        except UserError as err:
            raise UserError(f"{task}: config: {err}") from None
    elif is_reasoning_gym(task):
        from .reasoning_gym_tasks import check_config_bounds, known_generator

        name = task[len("reasoning_gym:"):]
        if known_generator(name):
            check_config_bounds(name, config)


def _choices(row: dict, where: str) -> dict[str, str] | None:
    choices = row.get("choices")
    if choices is None:
        return None
    if (not isinstance(choices, dict) or not choices
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in choices.items())):
        raise QuestionError(f"{where}: field 'choices' must map option letters to option texts, "
                            f"got {value_kind(choices)}")
    for letter, text in choices.items():
        _unicode(letter + text, "choices", where)
    return dict(choices)


def _images(row: dict, where: str, folder: str, max_images: int, max_pixels: int) -> list[str]:
    """The row's image paths, resolved against ``folder``, each opened, bounded and fully decoded
    (:func:`.image_files.check_image`): at most ``max_images`` of them and ``max_pixels`` pixels together."""
    value = row.get("image")
    if value is None:
        return []
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
        raise QuestionError(f"{where}: field 'image' must be a path or a list of paths, got {value_kind(value)}")
    if len(paths) > max_images:
        raise QuestionError(f"{where}: field 'image' names {len(paths)} images, above the limit of {max_images} "
                            "per question")
    out, pixels = [], 0
    for k, p in enumerate(paths):
        name = "image" if isinstance(value, str) else f"image[{k}]"
        full = os.path.normpath(os.path.join(folder, os.path.expanduser(p)))
        if not os.path.isfile(full):
            raise QuestionError(f"{where}: field {name!r}: image {full} not found")
        try:
            pixels += check_image(full, pixels, max_pixels)
        except ImageFileError as e:
            raise QuestionError(f"{where}: field {name!r}: {e}") from None
        out.append(full)
    return out


def _unknown_column(row: dict, where: str) -> None:
    unknown = [k for k in row if k not in QUESTION_COLUMNS]
    if not unknown:
        return
    hint = " (the gold answer's column is 'gold')" if unknown[0] in _GOLD_SYNONYMS else ""
    raise QuestionError(f"{where}: unknown field {unknown[0]!r}{hint}; a question has "
                        f"{', '.join(QUESTION_COLUMNS)}")


def question_from_row(row: Any, where: str, folder: str, max_images: int = MAX_IMAGES_PER_QUESTION,
                      max_pixels: int = MAX_PIXELS_PER_QUESTION) -> dict:
    """One validated question (keys :data:`QUESTION_KEYS`) from a raw row; ``where`` names the row; its images
    bounded by ``max_images`` and ``max_pixels`` (:mod:`.image_files`)."""
    if not isinstance(row, dict):
        raise QuestionError(f"{where}: must be a JSON object, got {value_kind(row)}")
    qid = row.get("id")
    if isinstance(qid, (str, int)) and not isinstance(qid, bool):
        where = f"{where} (id={str(qid)!r})"
    _unknown_column(row, where)
    qid = _question_id(row, where)
    has_prompt, has_question = row.get("prompt") is not None, row.get("question") is not None
    if has_prompt and has_question:
        raise QuestionError(f"{where}: has both 'prompt' and 'question'; give exactly one of them")
    if not has_prompt and not has_question:
        raise QuestionError(f"{where}: missing field 'prompt' (or 'question')")
    prompt = _text(row, "prompt" if has_prompt else "question", where, required=True)
    return {"id": qid, "prompt": prompt, "gold": _gold(row, where), "choices": _choices(row, where),
            "images": _images(row, where, folder, max_images, max_pixels),
            "reframed_prompt": _text(row, "reframed_prompt", where), "generator": _generator(row, where)}


def _checked_questions(located: Iterable[tuple[str, Any]], source: str, folder: str, **bounds) -> list[dict]:
    questions: list[dict] = []
    seen: dict[str, str] = {}
    prefix = f"{source}, "
    for loc, row in located:
        q = question_from_row(row, loc, folder, **bounds)
        short = loc[len(prefix):] if loc.startswith(prefix) else loc
        if q["id"] in seen:
            raise QuestionError(f"{loc} (id={q['id']!r}): duplicate id {q['id']!r}, already used by "
                                f"{seen[q['id']]}; every question must appear once")
        seen[q["id"]] = short
        questions.append(q)
    if not questions:
        raise QuestionError(f"{source}: the file has no questions")
    return questions


def read_questions(path: str | os.PathLike, max_images: int = MAX_IMAGES_PER_QUESTION,
                   max_pixels: int = MAX_PIXELS_PER_QUESTION) -> list[dict]:
    """The questions of a ``.jsonl`` or ``.parquet`` file, validated (module docstring), in file order; every
    image decoded whole, at most ``max_images`` per question and ``max_pixels`` pixels over a question's images
    (:mod:`.image_files`).

    Raises :class:`QuestionError` naming the file, the row and the field of the first bad row."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    return _checked_questions(_rows(path), path, folder, max_images=max_images, max_pixels=max_pixels)


def questions_from_task(task: str, n: int, seed: int, **task_kwargs) -> list[dict]:
    """``n`` generated questions of ``task`` (:func:`.tasks.generate_prompts` with ``seed``) in the shape of
    :func:`read_questions`: ``gold`` is the task's answer, ids are ``f"{task}-{seed}-{i}"``. A task named
    ``reasoning_gym:<name>`` is that reasoning-gym generator, ``task_kwargs`` its config
    (:mod:`.reasoning_gym_tasks`). At most :data:`~.splits.MAX_GENERATOR_INDEX` + 1 questions: each records
    its index, and a record past that is refused where a question file is read."""
    if isinstance(n, int) and n > MAX_GENERATOR_INDEX + 1:
        raise UserError(f"{task}: at most {MAX_GENERATOR_INDEX + 1:,} questions of one generated stream, got {n:,} "
                        "(data.splits.MAX_GENERATOR_INDEX)")
    if is_reasoning_gym(task):
        questions = reasoning_gym_questions(task, n, seed, **task_kwargs)
    else:
        questions = [{"id": f"{task}-{seed}-{i}", "prompt": p["prompt"], "gold": p["gold"], "choices": None,
                      "images": [], "reframed_prompt": None,
                      "generator": {"task": task, "config": dict(task_kwargs), "seed": int(seed), "index": i}}
                     for i, p in enumerate(generate_prompts(task, n, seed, **task_kwargs))]
    remember_generated(questions)  # their split keys (data.splits.question_key) need not draw them again
    return questions


def task_source(task: str, seed: int, instruction: str | None = None, **task_kwargs) -> QuestionSource:
    """The question stream of ``task`` under ``seed`` (:func:`questions_from_task`, ``instruction`` appended by
    :func:`with_instruction`), as a :class:`~.splits.QuestionSource`: the splits cut from it are disjoint by
    construction (:mod:`.splits`)."""
    import json

    config = json.dumps(task_kwargs, sort_keys=True, default=str)
    name = f"{task} (seed {seed}" + (f", {config}" if task_kwargs else "") + ")"
    # the stream ends at the last index a record may name: a split larger than that is a SplitError
    return QuestionSource(name, lambda n: with_instruction(questions_from_task(task, min(n, MAX_GENERATOR_INDEX + 1),
                                                                               seed, **task_kwargs), instruction),
                          identity=(task, int(seed), config, instruction or ""))


def task_splits(task: str, seed: int, sizes: dict[str, int], exclude: Iterable[str] = (),
                instruction: str | None = None, **task_kwargs) -> dict[str, list[dict]]:
    """Named splits of ``task`` (``{name: size}``, cut in that order from one pool of distinct questions drawn
    with ``seed``), disjoint from each other and from the question keys in ``exclude``
    (:func:`~.splits.draw_splits`; a split that cannot be filled is a :class:`~.splits.SplitError`)."""
    source = task_source(task, seed, instruction, **task_kwargs)
    return draw_splits([SplitSpec(name, n, source) for name, n in sizes.items()], exclude=exclude)


def with_instruction(questions: list[dict], instruction: str | None) -> list[dict]:
    """The questions with ``instruction`` appended to every prompt after one space (``"... 3 + 4 =" ->
    "... 3 + 4 = Answer with just the number."``); ``None`` or ``""`` leaves them as they are. It is part of the
    question as written, so a question file holds it and every command that samples sees the same text."""
    if not instruction:
        return list(questions)
    if not isinstance(instruction, str) or not instruction.strip():
        raise UserError(f"an instruction is a non-blank string, got {instruction!r}")
    return [dict(q, prompt=f"{q['prompt']} {instruction.strip()}") for q in questions]


def write_questions(path: str | os.PathLike, questions: list[dict]) -> None:
    """Write ``questions`` as a JSONL question file (``id``, ``prompt``, ``gold`` per line, and ``generator``
    when known), atomically (a temporary file renamed into place), and read it back: a file that does not read
    back as written is a ``RuntimeError``."""
    import json

    from ..safe_files import atomic_write

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_write(path) as fh:
        for q in questions:
            row = {"id": q["id"], "prompt": q["prompt"], "gold": q["gold"]}
            if q.get("generator") is not None:
                row["generator"] = q["generator"]
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    back = read_questions(path)
    kept = ("id", "prompt", "gold", "generator")
    if [tuple(q.get(k) for k in kept) for q in back] != [tuple(q.get(k) for k in kept) for q in questions]:
        raise RuntimeError(f"{path}: the file does not read back as written")


def collate_questions(items: list[dict]) -> dict[str, list]:
    """Questions -> a batch ``{key: [value per question]}`` over :data:`BATCH_KEYS` (None values kept)."""
    return collate_prompts([{k: q[k] for k in BATCH_KEYS} for q in items])


class QuestionDataModule(pl.LightningDataModule):
    """Batches of questions for test-time RL, from a question file or a generated task.

    Args:
        path: a question file (:func:`read_questions`); or
        task: a generated task (:data:`.tasks.TASKS`, or ``reasoning_gym:<name>``) with ``task_kwargs``, ``n`` questions drawn with
            ``seed`` (exactly one of ``path`` and ``task``).
        batch_size: questions per batch.
        shuffle: True: a new permutation every epoch (:class:`EpochSeededSampler`, seeded by
            ``(seed, epoch)``): TTRL's epochs over a fixed unlabeled test set. False: the file order, read
            once per epoch as a stream (Pixelis' online setting; run one epoch).
        val_path / val_task: optional validation questions; a ``val_task`` draws ``n_val`` questions with
            ``val_task_kwargs`` (default: ``task_kwargs``).
        calibration_path / n_calibration: an optional labelled dev-cal split, returned by
            :meth:`calibration_questions` (every question must have a gold answer): the file's questions
            (the first ``n_calibration`` of them when it is given), or, for a generated task,
            ``n_calibration`` questions of ``task``.
        seed: the data seed (generation and shuffling).

    Generated splits are disjoint by construction (:mod:`.splits`): the training, validation and calibration
    questions of one task are cut, in that order, from one pool of its distinct questions drawn with ``seed``
    (so the training split is the first ``n`` distinct questions whatever else is asked for), a split of
    another task or a file's skips the questions already taken, and a split that cannot be filled is one
    :class:`~.splits.SplitError` naming how many distinct questions the task holds. A calibration split never
    shares a question with the training or validation split (refused for files).

    Batches: ``{"id", "prompt", "gold", "choices", "images", "reframed_prompt"}``, each a list over the
    batch (:func:`collate_questions`). The train loader is a :class:`ResumableDataLoader`: a run resumed
    from a mid-epoch checkpoint sees the batches the uninterrupted run saw.
    """

    def __init__(
        self,
        path: str | None = None,
        task: str | None = None,
        task_kwargs: dict[str, Any] | None = None,
        n: int = 64,
        batch_size: int = 8,
        shuffle: bool = True,
        val_path: str | None = None,
        val_task: str | None = None,
        val_task_kwargs: dict[str, Any] | None = None,
        n_val: int = 16,
        calibration_path: str | None = None,
        n_calibration: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ):
        super().__init__()
        where = f"{type(self).__name__} argument"
        if (path is None) == (task is None):
            raise UserError(f"{where}s: give exactly one of path and task, got "
                            f"{'both' if path is not None else 'neither'}")
        if val_path is not None and val_task is not None:
            raise UserError(f"{where}s: give at most one of val_path and val_task")
        for name, value, low in (("n", n, 1), ("batch_size", batch_size, 1), ("n_val", n_val, 1),
                                 ("seed", seed, 0), ("num_workers", num_workers, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UserError(f"{where} {name} must be an integer >= {low}, got {value!r}")
        if n_calibration is not None and (isinstance(n_calibration, bool)
                                          or not isinstance(n_calibration, int) or n_calibration < 0):
            raise UserError(f"{where} n_calibration must be an integer >= 0 or null, got {n_calibration!r}")
        if task is None and calibration_path is None and n_calibration:
            raise UserError(f"{where} n_calibration needs calibration_path with a question file "
                            "(a generated task draws its calibration questions itself)")
        self.save_hyperparameters()
        self._train: list[dict] | None = None
        self._val: list[dict] | None = None
        self._calibration: list[dict] | None = None

    def _load_calibration_file(self) -> list[dict]:
        h = self.hparams
        questions = read_questions(h.calibration_path)
        if h.n_calibration is not None:
            if h.n_calibration > len(questions):
                raise QuestionError(f"{h.calibration_path}: n_calibration={h.n_calibration} but the file "
                                    f"has {len(questions)} questions")
            questions = questions[:h.n_calibration]
        unlabelled = [q["id"] for q in questions if q["gold"] is None]
        if unlabelled:
            raise QuestionError(f"{h.calibration_path}: the calibration split must be labelled, but "
                                f"{len(unlabelled)} question(s) have no gold: {few_ids(unlabelled)}")
        return questions

    def _load_splits(self) -> dict[str, list[dict]]:
        """``train``, ``validation`` and ``calibration``: the files as they are; the generated ones cut from one
        pool of distinct questions per task, drawn with ``seed`` (:mod:`.splits`), skipping every question of
        the files. A calibration split that shares a question with the training or validation split is
        refused: its gold answers would be read for questions the run trains or is scored on. A validation
        file may hold the training questions (TTRL's own protocol scores the trained-on questions)."""
        h = self.hparams
        kwargs = h.task_kwargs or {}
        files: dict[str, list[dict]] = {}
        if h.path is not None:
            files["train"] = read_questions(h.path)
        if h.val_path is not None:
            files["validation"] = read_questions(h.val_path)
        if h.calibration_path is not None:
            files["calibration"] = self._load_calibration_file()
        specs = []
        if h.task is not None:
            specs.append(SplitSpec("train", h.n, task_source(h.task, h.seed, **kwargs)))
        if h.val_task is not None:
            val_kwargs = h.val_task_kwargs if h.val_task_kwargs is not None else kwargs
            specs.append(SplitSpec("validation", h.n_val, task_source(h.val_task, h.seed, **val_kwargs)))
        if h.task is not None and h.n_calibration and h.calibration_path is None:
            specs.append(SplitSpec("calibration", h.n_calibration, task_source(h.task, h.seed, **kwargs)))
        file_keys = {name: [question_key(q) for q in qs] for name, qs in files.items()}
        splits = {**files, **draw_splits(specs, exclude=set().union(*file_keys.values()))}
        # a generated split skips every file's questions, so only two files can share one
        calibration = set(file_keys.get("calibration", ()))
        for name in ("train", "validation"):
            shared = [q["id"] for q, k in zip(files.get(name, ()), file_keys.get(name, ())) if k in calibration]
            if shared:
                raise SplitError(f"the calibration split shares {len(shared)} question(s) with the {name} split "
                                 f"({few_ids(shared)}); a labelled dev-cal split must hold other questions")
        return {"train": splits["train"], "validation": splits.get("validation", []),
                "calibration": splits.get("calibration", [])}

    def setup(self, stage: str | None = None) -> None:
        if self._train is None:
            splits = self._load_splits()
            self._train, self._val, self._calibration = (splits["train"], splits["validation"],
                                                         splits["calibration"])

    def train_questions(self) -> list[dict]:
        self.setup()
        return self._train

    def val_questions(self) -> list[dict]:
        self.setup()
        return self._val

    def calibration_questions(self) -> list[dict]:
        """The labelled dev-cal questions (``[]`` when neither a calibration file nor ``n_calibration`` for
        a generated task is given); loaded once, with the other splits."""
        self.setup()
        return self._calibration

    def train_dataloader(self) -> DataLoader:
        data = self.train_questions()
        h = self.hparams
        return ResumableDataLoader(data, batch_size=h.batch_size, num_workers=h.num_workers,
                                   sampler=EpochSeededSampler(len(data), h.seed) if h.shuffle else None,
                                   collate_fn=collate_questions)

    def val_dataloader(self):
        data = self.val_questions()
        if not data:
            return []
        return DataLoader(data, batch_size=self.hparams.batch_size, shuffle=False,
                          num_workers=self.hparams.num_workers, collate_fn=collate_questions)


def few_ids(ids: list[str], limit: int = 5) -> str:
    """The first ``limit`` ids, quoted (``'a', 'b'``), and how many more: question ids in messages."""
    shown = ", ".join(map(repr, ids[:limit]))
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")

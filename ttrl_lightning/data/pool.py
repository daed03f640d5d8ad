"""The columnar rollout pool the best-of-N harness works on.

:class:`RolloutPool` is the columnar form: answers grouped into per-question equivalence classes
(``answers.canonical_answer_classes``), gold correctness per class, the options of multiple-choice
questions, and the original view's per-token signals as padded ``[Q, R, T]`` float32 tensors.

The record schema and its checks are :mod:`.pool_schema`, the JSONL / Parquet files :mod:`.pool_files`; their
public names are re-exported here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Iterable, Iterator

import torch
from torch import Tensor

from ..answers import NO_ANSWER, answers_equal, canonical_answer_classes, extract_answer
from .pool_files import parse_records, read_records, read_settings, write_records
from .pool_schema import (FLOAT32_OVERFLOW, MAX_TOKENS_PER_ROLLOUT, RECORD_FIELDS, ROLLOUT_FIELDS, TOKEN_FIELDS,
                          UNIT_INTERVAL_FIELDS, VIEWS, PoolError, checked_records, validate_record)

__all__ = ["PoolError", "RolloutPool", "RECORD_FIELDS", "ROLLOUT_FIELDS", "TOKEN_FIELDS", "VIEWS",
           "FLOAT32_OVERFLOW", "MAX_TOKENS_PER_ROLLOUT", "UNIT_INTERVAL_FIELDS", "validate_record",
           "read_records", "read_settings", "write_records", "records_to_pool", "pool_to_records", "load_pool",
           "check_settings_match"]


@dataclass
class RolloutPool:
    """Columnar rollout pool.

    Attributes:
        ids, gold: per question (``gold`` None: no gold answer; accuracy is not evaluated on it).
        class_names: per question, the representative string of each answer class.
        answer_class: ``[Q, 2, R]`` class id of each rollout, view 0 = original, 1 = reframed (-1: absent).
        class_correct: ``[Q, C]`` whether a class matches the gold answer (``NO_ANSWER`` never does).
        no_answer_class: ``[Q]`` class id of ``NO_ANSWER`` (-1 when no rollout was unextractable).
        lengths: ``[Q, R]`` generated tokens per original-view rollout (0 when unknown).
        signals: name -> ``[Q, R, T]`` float32 per-token signals of the original view, zero-padded.
        choices: per question, the options of a multiple-choice question (None: open question; the
            default is None for every question).
        source: the file the pool was read from (named in error messages), None when built in memory.
    """

    ids: list[str]
    gold: list[str | None]
    class_names: list[list[str]]
    answer_class: Tensor
    class_correct: Tensor
    no_answer_class: Tensor
    lengths: Tensor
    signals: dict[str, Tensor] = field(default_factory=dict)
    choices: list[dict[str, str] | None] | None = None
    source: str | None = None

    def __post_init__(self):
        if self.choices is None:
            self.choices = [None] * len(self.ids)
        if len(self.choices) != len(self.ids):
            raise ValueError(f"choices has {len(self.choices)} entries for {len(self.ids)} questions")

    @property
    def num_questions(self) -> int:
        return self.answer_class.shape[0]

    @property
    def num_rollouts(self) -> int:
        return self.answer_class.shape[2]

    def num_rollouts_in_view(self, view: int) -> int:
        return int((self.answer_class[:, view] >= 0).sum(-1).min()) if self.num_questions else 0

    @property
    def has_reframed(self) -> bool:
        return bool((self.answer_class[:, 1] >= 0).any())

    @property
    def graded(self) -> list[int]:
        """Indices of the questions that have a gold answer (accuracy is measured on these only)."""
        return [i for i, g in enumerate(self.gold) if g is not None]

    def select(self, indices: list[int]) -> "RolloutPool":
        """The pool restricted to the questions ``indices`` (in that order)."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        return RolloutPool(ids=[self.ids[i] for i in indices], gold=[self.gold[i] for i in indices],
                           class_names=[self.class_names[i] for i in indices],
                           answer_class=self.answer_class[idx], class_correct=self.class_correct[idx],
                           no_answer_class=self.no_answer_class[idx], lengths=self.lengths[idx],
                           signals={k: v[idx] for k, v in self.signals.items()},
                           choices=[self.choices[i] for i in indices], source=self.source)

    def require_signals(self, names: Iterable[str], method: str) -> None:
        missing = [n for n in names if n not in self.signals]
        if missing:
            raise PoolError(f"{self.source or 'the pool'}: method {method!r} needs per-token {missing} in "
                            f"every record, but the pool has {sorted(self.signals) or 'no per-token arrays'}")


def _build_pool(checked: Iterable[tuple[str, dict]], source: str | None) -> RolloutPool:
    """The columnar pool of records already checked by :func:`checked_records`."""
    ids, golds, choices, class_names = [], [], [], []
    cls_rows, correct_rows, na_rows, len_rows = [], [], [], []
    sig_rows: dict[str, list[list[list[float]]]] = {}
    counts = (0, 0)
    for _, rec in checked:
        views = {v: [r for r in rec["rollouts"] if r["view"] == v] for v in VIEWS}
        counts = (len(views["original"]), len(views["reframed"]))
        labels = [[r["answer"] if r["answer"] is not None else extract_answer(r["text"], rec["choices"])
                   for r in views[v]] for v in VIEWS]
        flat = labels[0] + labels[1]
        class_of, names = canonical_answer_classes(flat)
        gold = rec["gold"]
        correct = [gold is not None and n != NO_ANSWER and answers_equal(n, gold) for n in names]
        ids.append(rec["id"])
        golds.append(gold)
        choices.append(rec["choices"])
        class_names.append(names)
        cls_rows.append((class_of[: counts[0]], class_of[counts[0]:]))
        correct_rows.append(correct)
        na_rows.append(names.index(NO_ANSWER) if NO_ANSWER in names else -1)
        len_rows.append([r["num_tokens"] or 0 for r in views["original"]])
        for name in TOKEN_FIELDS:
            if name in views["original"][0]:  # checked_records: in every original-view rollout of every record
                sig_rows.setdefault(name, []).append([r[name] for r in views["original"]])
    q, r0, r1 = len(ids), counts[0], counts[1]
    width = max(r0, r1)
    answer_class = torch.full((q, 2, width), -1, dtype=torch.long)
    for i, (c0, c1) in enumerate(cls_rows):
        answer_class[i, 0, :r0] = torch.tensor(c0)
        if r1:
            answer_class[i, 1, :r1] = torch.tensor(c1)
    cmax = max(len(n) for n in class_names)
    class_correct = torch.zeros(q, cmax, dtype=torch.bool)
    for i, row in enumerate(correct_rows):
        class_correct[i, : len(row)] = torch.tensor(row, dtype=torch.bool)
    lengths = torch.zeros(q, width, dtype=torch.long)
    lengths[:, :r0] = torch.tensor(len_rows, dtype=torch.long)
    signals = {}
    if sig_rows:
        tmax = int(lengths.max())
        valid = torch.arange(tmax) < lengths[..., None]  # [Q, R, T], row-major = records, rollouts, tokens
        for name, rows in sig_rows.items():
            t = torch.zeros(q, width, tmax, dtype=torch.float32)
            t[valid] = torch.tensor(list(chain.from_iterable(chain.from_iterable(rows))), dtype=torch.float32)
            signals[name] = t
    return RolloutPool(ids=ids, gold=golds, class_names=class_names, answer_class=answer_class,
                       class_correct=class_correct, no_answer_class=torch.tensor(na_rows, dtype=torch.long),
                       lengths=lengths, signals=signals, choices=choices, source=source)


def records_to_pool(records: Iterable[dict]) -> RolloutPool:
    """Build the columnar pool: validate every record and the rules between records (module docstring),
    extract answers, group equivalent answers, mark gold-correct classes.

    Every question must have the same number of rollouts per view (the protocol samples subsets of a
    fixed pool size); per-token arrays must be present for all original-view rollouts or for none.
    """
    return _build_pool(checked_records(((f"record {i}", r) for i, r in enumerate(records)), None), None)


def pool_to_records(pool: RolloutPool) -> Iterator[dict]:
    """Inverse of :func:`records_to_pool` (answers written as their class representatives)."""
    r0, r1 = pool.num_rollouts_in_view(0), pool.num_rollouts_in_view(1)
    for i in range(pool.num_questions):
        names = pool.class_names[i]
        classes, lengths = pool.answer_class[i].tolist(), pool.lengths[i].tolist()
        values = {name: t[i].tolist() for name, t in pool.signals.items()}  # one conversion per question
        rollouts = []
        for view, count in ((0, r0), (1, r1)):
            for j in range(count):
                ro = {"answer": names[classes[view][j]], "text": None, "view": VIEWS[view]}
                if view == 0:
                    n = lengths[j]
                    for name, rows in values.items():
                        ro[name] = rows[j][:n]
                    if not pool.signals and n:
                        ro["num_tokens"] = n
                rollouts.append(ro)
        yield {"id": pool.ids[i], "gold": pool.gold[i], "choices": pool.choices[i], "rollouts": rollouts}


def load_pool(path: str) -> RolloutPool:
    """Read and validate a pool file (``.jsonl`` / ``.parquet``) into its columnar form: the one loader of
    ``ttrl pool validate`` and ``ttrl bon``, so both refuse the same files (:class:`PoolError`)."""
    return _build_pool(checked_records(parse_records(path), path), path)


def check_settings_match(pool: RolloutPool, settings: dict | None, path: str) -> None:
    """Refuse (:class:`PoolError`) a pool whose records contradict its own settings: ``ttrl generate``'s
    ``views`` and ``n`` (every question has ``n`` rollouts in each of those views and none in another)."""
    if not settings or "n" not in settings or "views" not in settings:
        return
    n, views = settings["n"], list(settings["views"])
    for view, name in enumerate(VIEWS):
        expected = n if name in views else 0
        got = pool.num_rollouts_in_view(view)
        if got != expected:
            raise PoolError(f"{path}: its settings say n={n} in views {views}, but its questions have {got} "
                            f"{name}-view rollouts each")


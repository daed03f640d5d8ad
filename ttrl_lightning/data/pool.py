"""Rollout pools: the record schema, JSONL / Parquet I/O and the columnar form the harness works on.

Record schema (one per question)::

    {"id": str, "gold": str | null, "choices": {letter: text} | null,
     "rollouts": [
        {"answer": str | null,            # null: extracted from "text" with extract_answer(text, choices)
         "text": str | null,
         "view": "original" | "reframed", # Self-Harmony's two views; default "original"
         "entropy": [float], "self_certainty": [float], "logprob": [float],      # per generated token
         "visual_engagement": [float], "image_attention": [float],              # (all optional)
         "num_tokens": int | null},       # optional, when no per-token array is given
        ...]}

Per-token arrays of one rollout must share one length (its number of generated tokens). A bad record,
or a key the schema does not name, raises :class:`PoolError` naming the record and the field.
``rollout.records_from_rollouts`` writes these records from the rollout engine's output.

:class:`RolloutPool` is the columnar form: answers grouped into per-question equivalence classes
(``answers.canonical_answer_classes``), gold correctness per class, the options of multiple-choice
questions, and the original view's per-token signals as padded ``[Q, R, T]`` tensors.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import torch
from torch import Tensor

from ..answers import NO_ANSWER, answers_equal, canonical_answer_classes, extract_answer

__all__ = ["PoolError", "RolloutPool", "RECORD_FIELDS", "ROLLOUT_FIELDS", "TOKEN_FIELDS", "VIEWS",
           "validate_record", "read_records", "write_records", "records_to_pool", "pool_to_records", "load_pool"]

#: Per-token signal fields of a rollout.
TOKEN_FIELDS = ("entropy", "self_certainty", "logprob", "visual_engagement", "image_attention")
#: Self-Harmony's views, in the order used everywhere (index 0 = original).
VIEWS = ("original", "reframed")
#: The keys of a record and of one of its rollouts; any other key is rejected.
RECORD_FIELDS = ("id", "gold", "choices", "rollouts")
ROLLOUT_FIELDS = ("answer", "text", "view", *TOKEN_FIELDS, "num_tokens")


class PoolError(ValueError):
    """A pool record violates the schema; the message names the record and the field."""


def _where(idx: int, rec: dict) -> str:
    rid = rec.get("id") if isinstance(rec, dict) else None
    return f"record {idx}" + (f" (id={rid!r})" if rid is not None else "")


def _reject_unknown(obj: dict, known: tuple[str, ...], where: str) -> None:
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise PoolError(f"{where}: unknown field {unknown[0]!r} (the schema has {', '.join(known)})")


def validate_record(rec: dict, idx: int = 0) -> dict:
    """Check one record against the schema and return it normalised (view defaults, float arrays)."""
    where = _where(idx, rec)
    if not isinstance(rec, dict):
        raise PoolError(f"{where}: must be a JSON object, got {type(rec).__name__}")
    for key in ("id", "rollouts"):
        if key not in rec:
            raise PoolError(f"{where}: missing field {key!r}")
    _reject_unknown(rec, RECORD_FIELDS, where)
    if not isinstance(rec["id"], str) or not rec["id"]:
        raise PoolError(f"{where}: field 'id' must be a non-empty string")
    gold = rec.get("gold")
    if gold is not None and not isinstance(gold, str):
        raise PoolError(f"{where}: field 'gold' must be a string or null")
    choices = rec.get("choices")
    if choices is not None and (not isinstance(choices, dict)
                                or not all(isinstance(k, str) and isinstance(v, str) for k, v in choices.items())):
        raise PoolError(f"{where}: field 'choices' must map option letters to option texts")
    rollouts = rec["rollouts"]
    if not isinstance(rollouts, list) or not rollouts:
        raise PoolError(f"{where}: field 'rollouts' must be a non-empty list")
    out_rollouts = []
    for j, ro in enumerate(rollouts):
        f = f"{where}: rollouts[{j}]"
        if not isinstance(ro, dict):
            raise PoolError(f"{f} must be an object")
        _reject_unknown(ro, ROLLOUT_FIELDS, f)
        ans, text = ro.get("answer"), ro.get("text")
        if ans is not None and not isinstance(ans, str):
            raise PoolError(f"{f}.answer must be a string or null")
        if text is not None and not isinstance(text, str):
            raise PoolError(f"{f}.text must be a string or null")
        view = ro.get("view", "original") or "original"
        if view not in VIEWS:
            raise PoolError(f"{f}.view must be one of {VIEWS}, got {view!r}")
        norm = {"answer": ans, "text": text, "view": view}
        length = None
        for name in TOKEN_FIELDS:
            arr = ro.get(name)
            if arr is None:
                continue
            if not isinstance(arr, (list, tuple)) or not arr:
                raise PoolError(f"{f}.{name} must be a non-empty list of numbers")
            try:
                vals = [float(v) for v in arr]
            except (TypeError, ValueError):
                raise PoolError(f"{f}.{name} must be a list of numbers") from None
            if not all(math.isfinite(v) for v in vals):
                raise PoolError(f"{f}.{name} holds NaN or inf")
            if length is not None and len(vals) != length:
                raise PoolError(f"{f}.{name} has {len(vals)} tokens but another array of this rollout has {length}")
            length = len(vals)
            norm[name] = vals
        n_tok = ro.get("num_tokens")
        if n_tok is not None:
            if not isinstance(n_tok, int) or n_tok < 1:
                raise PoolError(f"{f}.num_tokens must be a positive integer")
            if length is not None and n_tok != length:
                raise PoolError(f"{f}.num_tokens={n_tok} disagrees with its per-token arrays ({length})")
            length = n_tok
        norm["num_tokens"] = length
        out_rollouts.append(norm)
    return {"id": rec["id"], "gold": gold, "choices": choices, "rollouts": out_rollouts}


def _open_text(path: str, mode: str):
    return open(path, mode, encoding="utf-8")


def _parse_records(path: str) -> Iterator[dict]:
    """Yield the raw records of ``.jsonl`` (one JSON object per line) or ``.parquet``, unvalidated."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"pool file not found: {path}")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        for rec in pq.read_table(path).to_pylist():
            if isinstance(rec.get("choices"), list):  # a Parquet map reads back as (key, value) pairs
                rec["choices"] = dict(rec["choices"])
            yield rec
        return
    with _open_text(path, "r") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise PoolError(f"record {i} (line {i + 1}): invalid JSON: {e.msg}") from None


def read_records(path: str) -> Iterator[dict]:
    """Yield validated records from ``.jsonl`` or ``.parquet``."""
    for i, rec in enumerate(_parse_records(path)):
        yield validate_record(rec, i)


def write_records(records: Iterable[dict], path: str) -> None:
    """Write records as ``.jsonl`` or ``.parquet`` (chosen by the extension).

    In Parquet, ``choices`` is a string -> string map column: inferred as a struct, the options of all
    records would merge into one set of fields and each record would read back the others' letters as null.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        records = list(records)
        table = pa.Table.from_pylist(records)
        col = table.schema.get_field_index("choices")
        if col >= 0:
            choices = pa.array([rec.get("choices") for rec in records], type=pa.map_(pa.string(), pa.string()))
            table = table.set_column(col, "choices", choices)
        pq.write_table(table, path)
        return
    with _open_text(path, "w") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")


@dataclass
class RolloutPool:
    """Columnar rollout pool.

    Attributes:
        ids, gold: per question.
        class_names: per question, the representative string of each answer class.
        answer_class: ``[Q, 2, R]`` class id of each rollout, view 0 = original, 1 = reframed (-1: absent).
        class_correct: ``[Q, C]`` whether a class matches the gold answer (``NO_ANSWER`` never does).
        no_answer_class: ``[Q]`` class id of ``NO_ANSWER`` (-1 when no rollout was unextractable).
        lengths: ``[Q, R]`` generated tokens per original-view rollout (0 when unknown).
        signals: name -> ``[Q, R, T]`` float32 per-token signals of the original view, zero-padded.
        choices: per question, the options of a multiple-choice question (None: open question; the
            default is None for every question).
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

    def require_signals(self, names: Iterable[str], method: str) -> None:
        missing = [n for n in names if n not in self.signals]
        if missing:
            raise ValueError(f"method {method!r} needs per-token {missing} in the pool, which has "
                             f"{sorted(self.signals) or 'no per-token arrays'}")


def records_to_pool(records: Iterable[dict]) -> RolloutPool:
    """Build the columnar pool: extract answers, group equivalent answers, mark gold-correct classes.

    Every question must have the same number of rollouts per view (the protocol samples subsets of a
    fixed pool size); per-token arrays must be present for all original-view rollouts or for none.
    """
    ids, golds, choices, class_names, cls_rows, correct_rows, na_rows, len_rows = [], [], [], [], [], [], [], []
    sig_rows: dict[str, list[list[list[float]]]] = {}
    counts = None
    for qi, rec in enumerate(records):
        rec = validate_record(rec, qi)
        views = {v: [r for r in rec["rollouts"] if r["view"] == v] for v in VIEWS}
        c = (len(views["original"]), len(views["reframed"]))
        if c[0] == 0:
            raise PoolError(f"{_where(qi, rec)}: has no rollout of view 'original'")
        if counts is None:
            counts = c
        elif c != counts:
            raise PoolError(f"{_where(qi, rec)}: has {c[0]} original / {c[1]} reframed rollouts but earlier "
                            f"records have {counts[0]} / {counts[1]}; pools need a fixed size per view")
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
        cls_rows.append((class_of[: c[0]], class_of[c[0]:]))
        correct_rows.append(correct)
        na_rows.append(names.index(NO_ANSWER) if NO_ANSWER in names else -1)
        len_rows.append([r["num_tokens"] or 0 for r in views["original"]])
        for name in TOKEN_FIELDS:
            have = [name in r for r in views["original"]]
            if any(have) and not all(have):
                raise PoolError(f"{_where(qi, rec)}: '{name}' is given for some original-view rollouts only")
            if qi > 0 and all(have) != (name in sig_rows):
                raise PoolError(f"{_where(qi, rec)}: '{name}' must be given for every record or for none")
            if all(have):
                sig_rows.setdefault(name, []).append([r[name] for r in views["original"]])
    if counts is None:
        raise PoolError("the pool has no records")
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
        for name, rows in sig_rows.items():
            t = torch.zeros(q, width, tmax, dtype=torch.float32)
            for i, per_q in enumerate(rows):
                for j, arr in enumerate(per_q):
                    t[i, j, : len(arr)] = torch.tensor(arr, dtype=torch.float32)
            signals[name] = t
    return RolloutPool(ids=ids, gold=golds, class_names=class_names, answer_class=answer_class,
                       class_correct=class_correct, no_answer_class=torch.tensor(na_rows, dtype=torch.long),
                       lengths=lengths, signals=signals, choices=choices)


def pool_to_records(pool: RolloutPool) -> Iterator[dict]:
    """Inverse of :func:`records_to_pool` (answers written as their class representatives)."""
    r0, r1 = pool.num_rollouts_in_view(0), pool.num_rollouts_in_view(1)
    for i in range(pool.num_questions):
        names = pool.class_names[i]
        rollouts = []
        for view, count in ((0, r0), (1, r1)):
            for j in range(count):
                ro = {"answer": names[int(pool.answer_class[i, view, j])], "text": None, "view": VIEWS[view]}
                if view == 0:
                    n = int(pool.lengths[i, j])
                    for name, t in pool.signals.items():
                        ro[name] = t[i, j, :n].tolist()
                    if not pool.signals and n:
                        ro["num_tokens"] = n
                rollouts.append(ro)
        yield {"id": pool.ids[i], "gold": pool.gold[i], "choices": pool.choices[i], "rollouts": rollouts}


def load_pool(path: str) -> RolloutPool:
    """Read and validate a pool file (``.jsonl`` / ``.parquet``) into its columnar form."""
    return records_to_pool(_parse_records(path))  # records_to_pool validates each record once

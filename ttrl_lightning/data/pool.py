"""Rollout pools: the record schema, JSONL / Parquet I/O and the columnar form the harness works on.

Record schema (one per question)::

    {"id": str, "gold": str | null, "choices": {letter: text} | null,
     "rollouts": [
        {"answer": str | null,            # null: extracted from "text" with extract_answer(text, choices)
         "text": str | null,
         "view": "original" | "reframed", # Self-Harmony's two views; absent or null: "original"
         "entropy": [float], "self_certainty": [float], "logprob": [float],      # per generated token
         "visual_engagement": [float], "image_attention": [float],              # (all optional)
         "num_tokens": int | null},       # optional, when no per-token array is given
        ...]}

Strict on purpose (a pool that parses leniently gives wrong numbers silently):

* per-token arrays hold JSON numbers only (no ``true``, no ``"0.5"``), finite **in float32**, the dtype
  :class:`RolloutPool` stores them in (``|x| < 3.4e38``; ``1e308`` is refused, not turned into ``inf``);
  ``visual_engagement`` and ``image_attention`` are shares in ``[0, 1]`` (up to ``1e-6`` of rounding
  above 1); the arrays of one rollout share one length, at most :data:`MAX_TOKENS_PER_ROLLOUT` (the int16
  token counts of :class:`~ttrl_lightning.eval.calibration.SortedTokens`); ``num_tokens`` is an integer
  (not ``true``, not ``3.0``) in the same range;
* ``view`` is one of :data:`VIEWS` (a string); ``id`` a non-empty string, unique in the pool;
* a key the schema does not name is refused (a misspelled signal is never silently ignored), and so is a
  key given twice in one JSON object;
* pool-level rules, checked while reading (:func:`read_records`, hence ``ttrl pool validate``, ``convert``
  and ``ttrl bon`` alike): every record has the same number of rollouts per view (at least one original);
  each per-token array, and the token count, is given for every original-view rollout of every record or
  for none; at least one record.

Every violation raises :class:`PoolError` (a :class:`~ttrl_lightning.errors.UserError`: one line, exit 1)
naming the file, the record (``line N`` of a JSONL file, counted from 1 as in editors; ``row N`` of a
Parquet file, counted from 0 as in pyarrow; ``record N`` of records in memory) with its id, and the field;
undecodable bytes, unparsable JSON, a Parquet file named ``.jsonl`` and the reverse included.
``gold`` may be null: ``ttrl bon`` evaluates accuracy on the records that have one and reports how many it
skipped (:func:`~ttrl_lightning.eval.bon.evaluate_pool`).
``rollout.records_from_rollouts`` writes these records from the rollout engine's output; :func:`write_records`
writes them through :func:`~ttrl_lightning.safe_files.atomic_write` (a failed write leaves the old file).

:class:`RolloutPool` is the columnar form: answers grouped into per-question equivalence classes
(``answers.canonical_answer_classes``), gold correctness per class, the options of multiple-choice
questions, and the original view's per-token signals as padded ``[Q, R, T]`` float32 tensors.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from itertools import chain
from typing import Iterable, Iterator

import torch
from torch import Tensor

from ..answers import NO_ANSWER, answers_equal, canonical_answer_classes, extract_answer
from ..errors import UserError
from ..safe_files import atomic_write, atomic_write_path

__all__ = ["PoolError", "RolloutPool", "RECORD_FIELDS", "ROLLOUT_FIELDS", "TOKEN_FIELDS", "VIEWS",
           "FLOAT32_OVERFLOW", "MAX_TOKENS_PER_ROLLOUT", "UNIT_INTERVAL_FIELDS", "validate_record",
           "read_records", "write_records", "records_to_pool", "pool_to_records", "load_pool"]

#: Per-token signal fields of a rollout.
TOKEN_FIELDS = ("entropy", "self_certainty", "logprob", "visual_engagement", "image_attention")
#: Self-Harmony's views, in the order used everywhere (index 0 = original).
VIEWS = ("original", "reframed")
#: The keys of a record and of one of its rollouts; any other key is rejected.
RECORD_FIELDS = ("id", "gold", "choices", "rollouts")
ROLLOUT_FIELDS = ("answer", "text", "view", *TOKEN_FIELDS, "num_tokens")
#: Most generated tokens of one rollout: VisConf's per-subset calibration counts a rollout's tokens in int16
#: (``eval.calibration.SortedTokens.counts``).
MAX_TOKENS_PER_ROLLOUT = torch.iinfo(torch.int16).max
#: Per-token fields that are shares (attention masses), with the rounding slack the scores allow.
UNIT_INTERVAL_FIELDS = ("visual_engagement", "image_attention")
UNIT_INTERVAL_SLACK = 1e-6
#: The smallest magnitude float32 rounds to inf: 2^128 (1 - 2^-25), halfway between FLT_MAX and 2^128.
FLOAT32_OVERFLOW = 2.0 ** 128 * (1.0 - 2.0 ** -25)


class PoolError(UserError):
    """A pool file or record violates the schema; the message names the file, the record and the field."""


def _label(loc: str, rec) -> str:
    rid = rec.get("id") if isinstance(rec, dict) else None
    return loc + (f" (id={rid!r})" if rid is not None else "")


def _kind(value) -> str:
    """How a wrong value is described in a message: its JSON type and a short repr."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    names = {str: "string", int: "integer", float: "number", list: "array", tuple: "array", dict: "object"}
    try:
        text = repr(value)
    except ValueError:  # an integer beyond Python's digit limit for str()
        text = "(too many digits to print)"
    return f"{names.get(type(value), type(value).__name__)} {text[:40] + '...' if len(text) > 40 else text}"


def _reject_unknown(obj: dict, known: tuple[str, ...], where: str) -> None:
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise PoolError(f"{where}: unknown field {unknown[0]!r} (the schema has {', '.join(known)})")


_FLOATS = {float}


def _in_range(v: float, unit: bool) -> bool:
    """Finite in float32 (``|v| < FLOAT32_OVERFLOW``; NaN compares false), and in [0, 1] for a share."""
    return 0.0 <= v <= 1.0 + UNIT_INTERVAL_SLACK if unit else -FLOAT32_OVERFLOW < v < FLOAT32_OVERFLOW


def _token_array(arr, f: str, name: str) -> list[float]:
    """A per-token array as Python floats, refusing non-numbers (``bool`` included: ``True`` is an ``int``),
    values that are not finite in float32 and, for shares, values outside ``[0, 1]``."""
    if not isinstance(arr, (list, tuple)) or not arr:
        raise PoolError(f"{f}.{name} must be a non-empty list of numbers, got {_kind(arr)}")
    if len(arr) > MAX_TOKENS_PER_ROLLOUT:
        raise PoolError(f"{f}.{name} has {len(arr)} tokens; a rollout may have at most "
                        f"{MAX_TOKENS_PER_ROLLOUT} (see README 'Rollout pools')")
    unit = name in UNIT_INTERVAL_FIELDS
    if set(map(type, arr)) == _FLOATS:  # fast path: the sum is NaN or inf iff an element is
        total = sum(arr)  # (or the sum overflows: the slow path then decides element by element)
        if total - total == 0.0 and _in_range(min(arr), unit) and _in_range(max(arr), unit):
            return list(arr)
    out = []  # the slow path names the first bad element
    for k, v in enumerate(arr):
        if type(v) is not float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise PoolError(f"{f}.{name}[{k}] must be a number, got {_kind(v)}")
            try:
                v = float(v)
            except OverflowError:
                raise PoolError(f"{f}.{name}[{k}] is an integer too large for float32") from None
        if not _in_range(v, unit):
            raise PoolError(_bad_value(f, name, k, v, unit))
        out.append(v)
    return out


def _bad_value(f: str, name: str, k: int, v: float, unit: bool) -> str:
    if v != v:
        return f"{f}.{name} holds NaN at token {k}"
    if v in (float("inf"), float("-inf")):
        return f"{f}.{name} holds {v} at token {k}"
    if not -FLOAT32_OVERFLOW < v < FLOAT32_OVERFLOW:
        return (f"{f}.{name} holds {v!r} at token {k}, which is inf in float32, the dtype signals are "
                f"stored in (|value| must be below 3.4e38)")
    return f"{f}.{name}[{k}] = {v!r} is outside [0, 1] ({name} is a share)"


def validate_record(rec: dict, idx: int = 0, where: str | None = None) -> dict:
    """Check one record against the schema and return it normalised (view defaults, float arrays, the
    rollout's token count in ``num_tokens``). ``where`` names the record in messages (default
    ``record {idx}``; the readers pass ``FILE, line N`` / ``FILE, row N``); the record's id is appended."""
    where = _label(where or f"record {idx}", rec)
    if not isinstance(rec, dict):
        raise PoolError(f"{where}: must be a JSON object, got {_kind(rec)}")
    _reject_unknown(rec, RECORD_FIELDS, where)
    for key in ("id", "rollouts"):
        if rec.get(key) is None:
            raise PoolError(f"{where}: missing field {key!r}")
    if not isinstance(rec["id"], str) or not rec["id"]:
        raise PoolError(f"{where}: field 'id' must be a non-empty string, got {_kind(rec['id'])}")
    gold = rec.get("gold")
    if gold is not None and not isinstance(gold, str):
        raise PoolError(f"{where}: field 'gold' must be a string or null, got {_kind(gold)}")
    choices = rec.get("choices")
    if choices is not None and (not isinstance(choices, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in choices.items())):
        raise PoolError(f"{where}: field 'choices' must map option letters to option texts, "
                        f"got {_kind(choices)}")
    rollouts = rec["rollouts"]
    if not isinstance(rollouts, list) or not rollouts:
        raise PoolError(f"{where}: field 'rollouts' must be a non-empty list, got {_kind(rollouts)}")
    out_rollouts = []
    for j, ro in enumerate(rollouts):
        f = f"{where}: rollouts[{j}]"
        if not isinstance(ro, dict):
            raise PoolError(f"{f} must be an object, got {_kind(ro)}")
        _reject_unknown(ro, ROLLOUT_FIELDS, f)
        ans, text = ro.get("answer"), ro.get("text")
        if ans is not None and not isinstance(ans, str):
            raise PoolError(f"{f}.answer must be a string or null, got {_kind(ans)}")
        if text is not None and not isinstance(text, str):
            raise PoolError(f"{f}.text must be a string or null, got {_kind(text)}")
        view = ro.get("view")
        if view is None:
            view = VIEWS[0]
        elif not isinstance(view, str) or view not in VIEWS:
            raise PoolError(f"{f}.view must be one of {VIEWS}, got {_kind(view)}")
        norm = {"answer": ans, "text": text, "view": view}
        length = None
        for name in TOKEN_FIELDS:
            arr = ro.get(name)
            if arr is None:
                continue
            vals = _token_array(arr, f, name)
            if length is not None and len(vals) != length:
                raise PoolError(f"{f}.{name} has {len(vals)} tokens but another array of this rollout "
                                f"has {length}")
            length = len(vals)
            norm[name] = vals
        n_tok = ro.get("num_tokens")
        if n_tok is not None:
            if type(n_tok) is not int or not 1 <= n_tok <= MAX_TOKENS_PER_ROLLOUT:
                raise PoolError(f"{f}.num_tokens must be an integer in [1, {MAX_TOKENS_PER_ROLLOUT}], "
                                f"got {_kind(n_tok)}")
            if length is not None and n_tok != length:
                raise PoolError(f"{f}.num_tokens={n_tok} disagrees with its per-token arrays ({length})")
            length = n_tok
        norm["num_tokens"] = length
        out_rollouts.append(norm)
    return {"id": rec["id"], "gold": gold, "choices": choices, "rollouts": out_rollouts}


class _PoolRules:
    """The rules that tie the records of one pool together, checked record by record while reading: unique
    ids, a fixed number of rollouts per view, per-token arrays and token counts for every original-view
    rollout of every record or for none. The first record fixes the pool's shape; a later record that
    differs is named with the first one."""

    def __init__(self, source: str | None):
        self.source = source
        self.seen: dict[str, str] = {}
        self.first: str | None = None
        self.counts: tuple[int, int] | None = None
        self.signals: frozenset[str] = frozenset()
        self.counted = False

    @staticmethod
    def _all_or_none(orig: list[tuple[int, dict]], has, what: str, where: str) -> bool:
        have = [has(r) for _, r in orig]
        if any(have) and not all(have):
            j = orig[have.index(False)][0]
            raise PoolError(f"{where}: rollouts[{j}] lacks {what}, which other original-view rollouts of "
                            "this record have; give it for all of them or for none")
        return bool(have) and all(have)

    def _short(self, loc: str) -> str:
        """``FILE, line 3`` -> ``line 3``: a second record of the same file, named in one message."""
        prefix = f"{self.source}, "
        return loc[len(prefix):] if self.source and loc.startswith(prefix) else loc

    def check(self, rec: dict, loc: str) -> None:
        where = _label(loc, rec)
        rid = rec["id"]
        if rid in self.seen:
            raise PoolError(f"{where}: duplicate id {rid!r}, already used by {self.seen[rid]}; every "
                            "question must appear once (a duplicate would be counted twice)")
        self.seen[rid] = self._short(loc)
        orig = [(j, r) for j, r in enumerate(rec["rollouts"]) if r["view"] == VIEWS[0]]
        counts = (len(orig), len(rec["rollouts"]) - len(orig))
        if counts[0] == 0:
            raise PoolError(f"{where}: has no rollout of view 'original'")
        signals = frozenset(n for n in TOKEN_FIELDS
                            if self._all_or_none(orig, lambda r, n=n: n in r, f"per-token {n!r}", where))
        counted = self._all_or_none(orig, lambda r: r["num_tokens"] is not None,
                                    "a token count (per-token arrays or num_tokens)", where)
        if self.first is None:
            self.first, self.counts, self.signals, self.counted = where, counts, signals, counted
            return
        first = self._short(self.first)
        if counts != self.counts:
            raise PoolError(f"{where}: has {counts[0]} original / {counts[1]} reframed rollouts but {first} "
                            f"has {self.counts[0]} / {self.counts[1]}; pools need a fixed size per view")
        if signals != self.signals:
            missing, extra = sorted(self.signals - signals), sorted(signals - self.signals)
            if missing:
                raise PoolError(f"{where}: lacks per-token {missing[0]!r}, which {first} has; per-token "
                                "arrays must be given for every record or for none")
            raise PoolError(f"{self.first}: lacks per-token {extra[0]!r}, which {self._short(where)} has; "
                            "per-token arrays must be given for every record or for none")
        if counted != self.counted:
            lacking, having = (where, first) if self.counted else (self.first, self._short(where))
            raise PoolError(f"{lacking}: lacks token counts (per-token arrays or num_tokens), which {having} "
                            "has; give them for every record or for none")

    def finish(self) -> None:
        if self.first is None:
            raise PoolError(f"{self.source or 'the pool'}: the pool has no records")


def _checked(located: Iterable[tuple[str, object]], source: str | None) -> Iterator[tuple[str, dict]]:
    """Validate every record and the rules between them; yield ``(location, normalised record)``."""
    rules = _PoolRules(source)
    for loc, raw in located:
        rec = validate_record(raw, where=loc)
        rules.check(rec, loc)
        yield loc, rec
    rules.finish()


class _DuplicateKey(Exception):
    pass


def _object_without_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return out


_PARQUET_MAGIC = b"PAR1"


def _looks_like(head: bytes) -> str:
    """What the first bytes of a file suggest it is, for messages about a misnamed file."""
    stripped = head.lstrip()
    if not head:
        return "it is empty"
    if head.startswith(_PARQUET_MAGIC):
        return "it looks like a Parquet file (it starts with PAR1); name it .parquet"
    if head.startswith(b"\x1f\x8b"):
        return "it looks gzip-compressed; decompress it first"
    if stripped.startswith(b"{"):
        return "it looks like JSONL (it starts with '{'); name it .jsonl"
    return f"it starts with {head[:8]!r}"


def _parse_parquet(path: str) -> Iterator[tuple[str, object]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as e:
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PoolError(f"{path}: not a readable Parquet file ({first_line})") from None
    for i, rec in enumerate(rows):
        if isinstance(rec, dict) and isinstance(rec.get("choices"), list):
            rec["choices"] = dict(rec["choices"])  # a Parquet map reads back as (key, value) pairs
        yield f"{path}, row {i}", rec


def _parse_jsonl(path: str) -> Iterator[tuple[str, object]]:
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            loc = f"{path}, line {n}"
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise PoolError(f"{loc}: not valid UTF-8 (byte {e.start + 1} of the line is "
                                f"{raw[e.start:e.start + 1]!r})") from None
            if not line.strip():
                continue
            try:
                yield loc, json.loads(line, object_pairs_hook=_object_without_duplicate_keys)
            except _DuplicateKey as e:
                raise PoolError(f"{loc}: key {e.args[0]!r} is given twice in one object") from None
            except json.JSONDecodeError as e:
                raise PoolError(f"{loc}: invalid JSON at column {e.colno}: {e.msg}") from None
            except ValueError as e:  # e.g. an integer literal longer than Python's 4300-digit limit
                raise PoolError(f"{loc}: invalid JSON: {str(e).splitlines()[0]}") from None
            except RecursionError:
                raise PoolError(f"{loc}: invalid JSON: nested too deeply") from None


def _parse_records(path: str) -> Iterator[tuple[str, object]]:
    """Yield ``(location, raw record)`` of ``.parquet`` (one row per record) or any other file read as JSONL
    (one JSON object per line), unvalidated; a file whose first bytes contradict its name is refused."""
    if not os.path.isfile(path):
        raise PoolError(f"{path}: pool file not found" if not os.path.exists(path) else f"{path}: not a file")
    with open(path, "rb") as fh:
        head = fh.read(16)
    if path.endswith(".parquet"):
        if not head.startswith(_PARQUET_MAGIC):
            raise PoolError(f"{path}: not a Parquet file: {_looks_like(head)}")
        return _parse_parquet(path)
    if head.startswith(_PARQUET_MAGIC) or head.startswith(b"\x1f\x8b"):
        raise PoolError(f"{path}: not a JSONL file: {_looks_like(head)}")
    return _parse_jsonl(path)


def read_records(path: str) -> Iterator[dict]:
    """Yield validated, normalised records from ``.jsonl`` or ``.parquet``, checking the pool-level rules
    as they go (a :class:`PoolError` names the first violation)."""
    for _, rec in _checked(_parse_records(path), path):
        yield rec


def write_records(records: Iterable[dict], path: str) -> None:
    """Write records as ``.jsonl`` or ``.parquet`` (chosen by the extension), validated and normalised.

    The file is written through :func:`~ttrl_lightning.safe_files.atomic_write`: a record that fails
    validation (or any other error, or an interrupt) leaves a previous file at ``path`` byte-identical, and
    two writers of one path never share a temporary file. In Parquet, ``choices`` is a string -> string map
    column: inferred as a struct, the options of all records would merge into one set of fields and each
    record would read back the others' letters as null.
    """
    checked = (rec for _, rec in _checked(((f"record {i}", r) for i, r in enumerate(records)), None))
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        records = list(checked)
        table = pa.Table.from_pylist(records)
        col = table.schema.get_field_index("choices")
        if col >= 0:
            choices = pa.array([rec.get("choices") for rec in records],
                               type=pa.map_(pa.string(), pa.string()))
            table = table.set_column(col, "choices", choices)
        with atomic_write_path(path) as tmp:
            pq.write_table(table, tmp)
        return
    with atomic_write(path) as fh:
        for rec in checked:
            fh.write(json.dumps(rec, allow_nan=False) + "\n")


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
    """The columnar pool of records already checked by :func:`_checked`."""
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
            if name in views["original"][0]:  # _checked: in every original-view rollout of every record
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
    return _build_pool(_checked(((f"record {i}", r) for i, r in enumerate(records)), None), None)


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
    return _build_pool(_checked(_parse_records(path), path), path)

"""The rollout-pool record schema and its checks (no file I/O: pseudo-labelers import its names).

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
  token counts of :class:`~ttrl_lightning.eval.bon.calibration.SortedTokens`); ``num_tokens`` is an integer
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
skipped (:func:`~ttrl_lightning.eval.bon.protocol.evaluate_pool`).
``rollout.records_from_rollouts`` writes these records from the rollout engine's output; :func:`write_records`
writes them through :func:`~ttrl_lightning.safe_files.atomic_write` (a failed write leaves the old file).

Files: :mod:`.pool_files`; the columnar form: :mod:`.pool`.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import torch

from ..errors import UserError

__all__ = ["PoolError", "token_array", "RECORD_FIELDS", "ROLLOUT_FIELDS", "TOKEN_FIELDS", "VIEWS", "FLOAT32_OVERFLOW",
           "MAX_TOKENS_PER_ROLLOUT", "UNIT_INTERVAL_FIELDS", "validate_record", "checked_records", "value_kind"]

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


def value_kind(value) -> str:
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


def token_array(arr, f: str, name: str) -> list[float]:
    """A per-token array ``f.name`` as Python floats (the one check of per-token arrays: pool files here,
    a labeler's rollout dicts in ``pseudo_labels.rollouts``), refusing non-numbers (``bool`` included: ``True`` is an ``int``),
    values that are not finite in float32 and, for shares, values outside ``[0, 1]``."""
    if not isinstance(arr, (list, tuple)) or not arr:
        raise PoolError(f"{f}.{name} must be a non-empty list of numbers, got {value_kind(arr)}")
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
                raise PoolError(f"{f}.{name}[{k}] must be a number, got {value_kind(v)}")
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
        raise PoolError(f"{where}: must be a JSON object, got {value_kind(rec)}")
    _reject_unknown(rec, RECORD_FIELDS, where)
    for key in ("id", "rollouts"):
        if rec.get(key) is None:
            raise PoolError(f"{where}: missing field {key!r}")
    if not isinstance(rec["id"], str) or not rec["id"]:
        raise PoolError(f"{where}: field 'id' must be a non-empty string, got {value_kind(rec['id'])}")
    gold = rec.get("gold")
    if gold is not None and not isinstance(gold, str):
        raise PoolError(f"{where}: field 'gold' must be a string or null, got {value_kind(gold)}")
    choices = rec.get("choices")
    if choices is not None and (not isinstance(choices, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in choices.items())):
        raise PoolError(f"{where}: field 'choices' must map option letters to option texts, "
                        f"got {value_kind(choices)}")
    rollouts = rec["rollouts"]
    if not isinstance(rollouts, list) or not rollouts:
        raise PoolError(f"{where}: field 'rollouts' must be a non-empty list, got {value_kind(rollouts)}")
    out_rollouts = []
    for j, ro in enumerate(rollouts):
        f = f"{where}: rollouts[{j}]"
        if not isinstance(ro, dict):
            raise PoolError(f"{f} must be an object, got {value_kind(ro)}")
        _reject_unknown(ro, ROLLOUT_FIELDS, f)
        ans, text = ro.get("answer"), ro.get("text")
        if ans is not None and not isinstance(ans, str):
            raise PoolError(f"{f}.answer must be a string or null, got {value_kind(ans)}")
        if text is not None and not isinstance(text, str):
            raise PoolError(f"{f}.text must be a string or null, got {value_kind(text)}")
        view = ro.get("view")
        if view is None:
            view = VIEWS[0]
        elif not isinstance(view, str) or view not in VIEWS:
            raise PoolError(f"{f}.view must be one of {VIEWS}, got {value_kind(view)}")
        norm = {"answer": ans, "text": text, "view": view}
        length = None
        for name in TOKEN_FIELDS:
            arr = ro.get(name)
            if arr is None:
                continue
            vals = token_array(arr, f, name)
            if length is not None and len(vals) != length:
                raise PoolError(f"{f}.{name} has {len(vals)} tokens but another array of this rollout "
                                f"has {length}")
            length = len(vals)
            norm[name] = vals
        n_tok = ro.get("num_tokens")
        if n_tok is not None:
            if type(n_tok) is not int or not 1 <= n_tok <= MAX_TOKENS_PER_ROLLOUT:
                raise PoolError(f"{f}.num_tokens must be an integer in [1, {MAX_TOKENS_PER_ROLLOUT}], "
                                f"got {value_kind(n_tok)}")
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


def checked_records(located: Iterable[tuple[str, object]], source: str | None) -> Iterator[tuple[str, dict]]:
    """Validate every record and the rules between them; yield ``(location, normalised record)``."""
    rules = _PoolRules(source)
    for loc, raw in located:
        rec = validate_record(raw, where=loc)
        rules.check(rec, loc)
        yield loc, rec
    rules.finish()



"""Join pools of disjoint question sets into one (``ttrl pool merge``, and ``ttrl generate``'s shards).

The inputs must not share a question id (a question sampled twice would be counted twice); given the
expected ids (the question file's, in file order), every one of them must be present and nothing else, and
the merged pool follows that order. Every record and the pool-level rules are checked by the strict pool
reader and writer (:mod:`ttrl_lightning.data.pool`); the output is written atomically.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..data.pool import PoolError, read_records, write_records
from ..data.questions import few_ids

__all__ = ["merge_records", "merge_pool_files"]


def merge_records(sources: Iterable[tuple[str, Iterable[dict]]],
                  expected_ids: Sequence[str] | None = None) -> list[dict]:
    """Records of ``sources`` (``(name, records)`` pairs) as one list, checked (module docstring).

    Without ``expected_ids`` the order is the sources' order; with them, theirs."""
    merged: dict[str, dict] = {}
    origin: dict[str, str] = {}
    for name, records in sources:
        for rec in records:
            rid = rec["id"]
            if rid in merged:
                raise PoolError(f"{name}: question {rid!r} is also in {origin[rid]}; the pools to merge must "
                                "hold disjoint questions")
            merged[rid] = rec
            origin[rid] = name
    if expected_ids is None:
        return list(merged.values())
    expected = list(expected_ids)
    wanted = set(expected)
    missing = [i for i in expected if i not in merged]
    extra = [i for i in merged if i not in wanted]
    if extra:
        raise PoolError(f"{origin[extra[0]]}: {len(extra)} question(s) that are not in the question set: "
                        f"{few_ids(extra)}")
    if missing:
        raise PoolError(f"the pools lack {len(missing)} of the {len(expected)} questions: {few_ids(missing)}")
    return [merged[i] for i in expected]


def merge_pool_files(paths: Sequence[str], out: str, expected_ids: Sequence[str] | None = None) -> int:
    """Merge the pool files ``paths`` into ``out`` (.jsonl or .parquet); returns the number of questions."""
    records = merge_records(((p, read_records(p)) for p in paths), expected_ids)
    write_records(records, out)
    return len(records)

"""Join pools of disjoint question sets into one (``ttrl pool merge``, and ``ttrl generate``'s shards).

The inputs must not share a question id (a question sampled twice would be counted twice); given the
expected ids (the question file's, in file order), every one of them must be present and nothing else, and
the merged pool follows that order. Every record and the pool-level rules are checked by the strict pool
reader and writer (:mod:`ttrl_lightning.data.pool`); the output is written atomically.

``ttrl generate`` writes the settings that decide a pool's rollouts (model and its content hash, question
file, sampling, seed, ...) beside it as ``POOL.settings.json`` (:func:`write_pool_settings`). Pools that have
them merge only when they agree (a rank pool made with another model, temperature or token limit is refused,
naming the setting), and the merged pool gets them too; pools without them (written by other tools) merge
unchecked, but not together with pools that have them.
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Sequence

from ..data.pool import PoolError, read_records, write_records
from ..data.questions import few_ids
from ..safe_files import atomic_write

__all__ = ["merge_records", "merge_pool_files", "pool_settings", "write_pool_settings"]

#: settings that may differ between the rank pools of one run (they say which share a pool holds)
_PER_RANK = ("rank", "world_size")


def settings_path(pool: str) -> str:
    return os.fspath(pool) + ".settings.json"


def write_pool_settings(pool: str, settings: dict) -> None:
    """Write ``settings`` beside ``pool`` (``POOL.settings.json``, atomically)."""
    with atomic_write(settings_path(pool)) as fh:
        json.dump(settings, fh, indent=1, sort_keys=True)
        fh.write("\n")


def pool_settings(pool: str) -> dict | None:
    """The settings written beside ``pool``, or None when it has none."""
    path = settings_path(pool)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            settings = json.load(fh)
    except (OSError, ValueError) as e:
        raise PoolError(f"{path}: not readable pool settings ({e})") from None
    if not isinstance(settings, dict):
        raise PoolError(f"{path}: pool settings must be a JSON object")
    return settings


def common_settings(paths: Sequence[str]) -> dict | None:
    """The settings all ``paths`` share (per-rank fields dropped), None when none has any; a pool whose
    settings differ from the first's, or that has none while others have, is refused naming the setting."""
    found = [(p, pool_settings(p)) for p in paths]
    with_settings = [(p, s) for p, s in found if s is not None]
    if not with_settings:
        return None
    bare = [p for p, s in found if s is None]
    if bare:
        raise PoolError(f"{bare[0]}: has no settings file ({os.path.basename(settings_path(bare[0]))}), but "
                        f"{with_settings[0][0]} has; pools from ttrl generate merge only with each other")
    first_path, first = with_settings[0]
    common = {k: v for k, v in first.items() if k not in _PER_RANK}
    for path, settings in with_settings[1:]:
        for key in sorted(set(common) | set(settings) - set(_PER_RANK)):
            if settings.get(key) != common.get(key):
                raise PoolError(f"{path} was made with {key}={settings.get(key)!r}, but {first_path} with "
                                f"{key}={common.get(key)!r}; only pools of the same settings merge")
    return common


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
    """Merge the pool files ``paths`` into ``out`` (.jsonl or .parquet), their settings checked and kept
    (module docstring); returns the number of questions."""
    settings = common_settings(paths)
    records = merge_records(((p, read_records(p)) for p in paths), expected_ids)
    write_records(records, out)
    if settings is not None:
        write_pool_settings(out, settings)
    return len(records)

"""Join pools of disjoint question sets into one (``ttrl pool merge``, and ``ttrl generate``'s shards).

The inputs must not share a question id (a question sampled twice would be counted twice); given the
expected ids (the question file's, in file order), every one of them must be present and nothing else, and
the merged pool follows that order. Every record and the pool-level rules are checked by the strict pool
reader and writer (:mod:`ttrl_lightning.data.pool`); the output is written atomically.

``ttrl generate`` writes the settings that decide a pool's rollouts (model and its content hash, question
file, engine, sampling, seed, ...) inside the pool file (``data.pool_files``: a JSONL header line, Parquet
metadata), so a copy or a conversion keeps them. Pools merge only when their settings agree (a rank pool made
with another model, engine, temperature or token limit is refused, naming the setting), and the merged pool
gets them too (the first pool's). A model or question file is compared by its content hash where both pools
have it, not by the spelling of its path (``models/x`` and ``models/x/``, a path through a symlink). A pool without settings (written by other tools) is refused unless ``allow_unknown_settings``
(``ttrl pool merge --allow-unknown-settings``); the merged pool then has no settings.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..data.pool import PoolError, read_records, read_settings, write_records
from ..data.pool_files import UNKNOWN_SETTINGS_FLAG
from ..data.questions import few_ids
from .store import CONTENT_KEYS

__all__ = ["merge_records", "merge_pool_files", "common_settings"]

#: settings that may differ between the rank pools of one run (they say which share a pool holds)
_PER_RANK = ("rank", "world_size")


def common_settings(paths: Sequence[str], allow_unknown: bool = False) -> dict | None:
    """The settings all ``paths`` share (per-rank fields dropped). A pool whose settings differ from the first's
    is refused naming the setting; a pool without settings is refused unless ``allow_unknown``, and then the
    result is None (the merged pool's settings are unknown)."""
    found = [(p, read_settings(p)) for p in paths]
    bare = [p for p, s in found if s is None]
    if bare and not allow_unknown:
        raise PoolError(f"{bare[0]}: has no settings (the model, engine and sampling that made it are unknown), "
                        f"so it cannot be checked against the others; give {UNKNOWN_SETTINGS_FLAG} to merge "
                        "it anyway")
    if bare:
        return None
    first_path, first = found[0]
    common = {k: v for k, v in first.items() if k not in _PER_RANK}
    for path, settings in found[1:]:
        for key in sorted(set(common) | set(settings) - set(_PER_RANK)):
            digest = CONTENT_KEYS.get(key)
            if digest and settings.get(digest) is not None and settings.get(digest) == common.get(digest):
                continue  # the same content under another spelling of its path (models/x vs models/x/, a link)
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


def merge_pool_files(paths: Sequence[str], out: str, expected_ids: Sequence[str] | None = None,
                     allow_unknown_settings: bool = False) -> int:
    """Merge the pool files ``paths`` into ``out`` (.jsonl or .parquet), their settings checked and kept
    inside it (module docstring); returns the number of questions."""
    settings = common_settings(paths, allow_unknown_settings)
    records = merge_records(((p, read_records(p)) for p in paths), expected_ids)
    write_records(records, out, settings)
    return len(records)

"""Rollout-pool files: JSONL and Parquet readers and the atomic writer, each record checked against the schema
(:mod:`.pool_schema`) while reading; a key given twice in one JSON object, undecodable bytes, unparsable JSON
and a Parquet file named ``.jsonl`` (or the reverse) are a :class:`~.pool_schema.PoolError` naming the file
and the record.

**Settings inside the file.** The settings that decided a pool's rollouts (``ttrl generate``'s model and its
content hash, question file, engine, sampling, seed, ...; ``ttrl pool simulate``'s configuration) travel in the
pool file itself, so that no copy, conversion or merge can separate them from the records:

* JSONL: a header line first, ``{"pool_settings": {...}}`` (a line with that one key; records never have it);
* Parquet: the schema's key-value metadata, key ``ttrl_lightning.pool_settings`` (JSON).

:func:`read_settings` reads them (None for a pool written by other tools), :func:`write_records` writes them.
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Iterator

from ..errors import first_line
from ..safe_files import atomic_write, atomic_write_path
from .pool_schema import PoolError, checked_records

__all__ = ["read_records", "write_records", "parse_records", "PARQUET_MAGIC", "looks_like", "parse_jsonl",
           "parse_parquet", "read_settings", "SETTINGS_KEY", "UNKNOWN_SETTINGS_FLAG"]

#: the JSONL header's one key, and the Parquet metadata key (as bytes), that hold a pool's settings
SETTINGS_KEY = "pool_settings"
_PARQUET_SETTINGS_KEY = b"ttrl_lightning.pool_settings"
#: the ``ttrl pool merge`` flag that lets pools without settings merge (named in the refusals)
UNKNOWN_SETTINGS_FLAG = "--allow-unknown-settings"


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


PARQUET_MAGIC = b"PAR1"


def looks_like(head: bytes) -> str:
    """What the first bytes of a file suggest it is, for messages about a misnamed file."""
    stripped = head.lstrip()
    if not head:
        return "it is empty"
    if head.startswith(PARQUET_MAGIC):
        return "it looks like a Parquet file (it starts with PAR1); name it .parquet"
    if head.startswith(b"\x1f\x8b"):
        return "it looks gzip-compressed; decompress it first"
    if stripped.startswith(b"{"):
        return "it looks like JSONL (it starts with '{'); name it .jsonl"
    return f"it starts with {head[:8]!r}"


def _unreadable_parquet(path: str, error: BaseException) -> PoolError:
    return PoolError(f"{path}: not a readable Parquet file ({first_line(error, None)})")


def parse_parquet(path: str) -> Iterator[tuple[str, object]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise _unreadable_parquet(path, e) from None
    for i, rec in enumerate(rows):
        if isinstance(rec, dict) and isinstance(rec.get("choices"), list):
            rec["choices"] = dict(rec["choices"])  # a Parquet map reads back as (key, value) pairs
        yield f"{path}, row {i}", rec


def _settings_header(obj, loc: str) -> dict | None:
    """The settings of a JSONL header line, None for any other line."""
    if not (isinstance(obj, dict) and SETTINGS_KEY in obj):
        return None
    if len(obj) != 1 or not isinstance(obj[SETTINGS_KEY], dict):
        raise PoolError(f"{loc}: a {SETTINGS_KEY!r} header line holds that one key, whose value is a JSON object")
    return obj[SETTINGS_KEY]


def _parse_pool_jsonl(path: str) -> Iterator[tuple[str, object]]:
    """``(location, object)`` of every line of a JSONL pool but its settings header (only the first line may be
    one)."""
    first = True
    for loc, obj in parse_jsonl(path):
        if _settings_header(obj, loc) is not None:
            if not first:
                raise PoolError(f"{loc}: a {SETTINGS_KEY!r} header is only allowed on the first line")
        else:
            yield loc, obj
        first = False


def parse_jsonl(path: str) -> Iterator[tuple[str, object]]:
    """``(location, object)`` of every non-empty line of a JSONL file, strictly parsed."""
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


def parse_records(path: str) -> Iterator[tuple[str, object]]:
    """Yield ``(location, raw record)`` of ``.parquet`` (one row per record) or any other file read as JSONL
    (one JSON object per line), unvalidated; a file whose first bytes contradict its name is refused."""
    if not os.path.isfile(path):
        raise PoolError(f"{path}: pool file not found" if not os.path.exists(path) else f"{path}: not a file")
    with open(path, "rb") as fh:
        head = fh.read(16)
    if path.endswith(".parquet"):
        if not head.startswith(PARQUET_MAGIC):
            raise PoolError(f"{path}: not a Parquet file: {looks_like(head)}")
        return parse_parquet(path)
    if head.startswith(PARQUET_MAGIC) or head.startswith(b"\x1f\x8b"):
        raise PoolError(f"{path}: not a JSONL file: {looks_like(head)}")
    return _parse_pool_jsonl(path)


def _checked_settings(settings, where: str) -> dict:
    if not isinstance(settings, dict):
        raise PoolError(f"{where}: pool settings must be a JSON object, got {type(settings).__name__}")
    try:
        json.dumps(settings, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise PoolError(f"{where}: pool settings are not plain JSON ({e})") from None
    return settings


def read_settings(path: str) -> dict | None:
    """The settings inside the pool file ``path`` (module docstring), or None when it has none."""
    parse_records(path)  # the file's existence and kind, with the readers' messages
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            metadata = pq.read_schema(path).metadata or {}
        except (pa.ArrowException, OSError, ValueError) as e:
            raise _unreadable_parquet(path, e) from None
        raw = metadata.get(_PARQUET_SETTINGS_KEY)
        if raw is None:
            return None
        try:
            settings = json.loads(raw)
        except ValueError as e:
            raise PoolError(f"{path}: its pool settings metadata is not JSON ({e})") from None
        return _checked_settings(settings, path)
    for loc, obj in parse_jsonl(path):
        header = _settings_header(obj, loc)
        return None if header is None else _checked_settings(header, loc)
    return None


def read_records(path: str) -> Iterator[dict]:
    """Yield validated, normalised records from ``.jsonl`` or ``.parquet``, checking the pool-level rules
    as they go (a :class:`PoolError` names the first violation)."""
    for _, rec in checked_records(parse_records(path), path):
        yield rec


def write_records(records: Iterable[dict], path: str, settings: dict | None = None) -> None:
    """Write records as ``.jsonl`` or ``.parquet`` (chosen by the extension), validated and normalised, with
    ``settings`` inside the file when given (module docstring).

    The file is written through :func:`~ttrl_lightning.safe_files.atomic_write`: a record that fails
    validation (or any other error, or an interrupt) leaves a previous file at ``path`` byte-identical, and
    two writers of one path never share a temporary file. In Parquet, ``choices`` is a string -> string map
    column: inferred as a struct, the options of all records would merge into one set of fields and each
    record would read back the others' letters as null.
    """
    checked = (rec for _, rec in checked_records(((f"record {i}", r) for i, r in enumerate(records)), None))
    if settings is not None:
        settings = _checked_settings(settings, f"{path}: the settings to write")
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
        if settings is not None:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                   _PARQUET_SETTINGS_KEY: json.dumps(settings, sort_keys=True)})
        with atomic_write_path(path) as tmp:
            pq.write_table(table, tmp)
        return
    with atomic_write(path) as fh:
        if settings is not None:
            fh.write(json.dumps({SETTINGS_KEY: settings}, sort_keys=True) + "\n")
        for rec in checked:
            fh.write(json.dumps(rec, allow_nan=False) + "\n")



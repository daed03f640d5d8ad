"""The sharded, resumable writer of ``ttrl generate``.

Next to ``--out POOL`` the run keeps ``POOL.parts/``:

* ``manifest.json``: the settings that decide the rollouts (model, question file and its SHA-256, views,
  n, sampling settings, seed, prompt format, answer extractor). A re-run with other settings is refused,
  naming the first setting that differs, so shards of two different runs never mix;
* ``rank{r}-of-{W}.{k:05d}.jsonl``: valid pools (``data.pool.write_records``, written to a temporary file
  renamed into place) of the questions finished since the previous shard, one every ``shard_size``
  questions, and one with whatever is finished when the run stops (end, error or Ctrl-C).

* ``rank{r}-of-{W}.lock``: held (``fcntl.flock``, exclusive) by the run writing rank r's shards, so a second
  run on the same ``--out`` is refused in one line instead of writing duplicate shards beside the first.

A shard is either complete or absent, so a killed run loses at most the questions it was sampling (Ctrl-C
and SIGTERM flush the finished ones first). A re-run reads every shard (through the strict pool reader) and
skips the questions found there; whatever rank wrote them, a question's rollouts depend on its row and seed
only (:mod:`.sampler`), so a question found twice with byte-identical records is kept once, and twice with
different records is refused.
"""
from __future__ import annotations

import glob
import json
import os
import re

from ..data.pool import read_records, write_records
from ..errors import UserError
from ..safe_files import atomic_write

__all__ = ["ShardStore", "parts_dir"]

MANIFEST = "manifest.json"
#: settings that name a file, and the setting holding its content's SHA-256: a re-run that spells the path
#: another way (``models/x/``, an absolute path) but has the same content is the same run
CONTENT_KEYS = {"model": "model_sha256", "data": "data_sha256"}
_SHARD = re.compile(r"rank(\d+)-of-(\d+)\.(\d{5})\.jsonl$")


def parts_dir(out: str) -> str:
    """``pool.parquet`` -> ``pool.parquet.parts``: the folder of the shards of ``out``."""
    return os.fspath(out) + ".parts"


class ShardStore:
    """Shards of one ``ttrl generate`` output (module docstring) for one rank."""

    def __init__(self, out: str, settings: dict, rank: int = 0, world_size: int = 1, shard_size: int = 8):
        if shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        self.out = os.fspath(out)
        self.dir = parts_dir(self.out)
        self.settings = settings
        self.rank, self.world_size, self.shard_size = rank, world_size, shard_size
        self._buffer: list[dict] = []
        self._lock = None

    def _take_lock(self) -> None:
        """Hold this rank's lock file until :meth:`close` (or the process ends)."""
        if self._lock is not None:
            return
        import fcntl

        path = os.path.join(self.dir, f"rank{self.rank}-of-{self.world_size}.lock")
        fh = open(path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise UserError(f"another run writes {self.dir} (rank {self.rank} of {self.world_size}); wait for it "
                            "to finish, or use another --out") from None
        self._lock = fh

    def close(self) -> None:
        """Release the lock (the shards stay)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def open(self) -> dict[str, dict]:
        """Create the folder or check its manifest against the settings, take this rank's lock; return the
        finished records by id (every shard of the folder, validated)."""
        os.makedirs(self.dir, exist_ok=True)
        self._take_lock()
        path = os.path.join(self.dir, MANIFEST)
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as fh:
                    saved = json.load(fh)
            except (OSError, ValueError) as e:
                raise UserError(f"{path}: not a readable manifest ({e}); remove {self.dir} to start over") \
                    from None
            for key, value in self.settings.items():
                by_content = CONTENT_KEYS.get(key)
                if by_content and saved.get(by_content) is not None and \
                        saved.get(by_content) == self.settings.get(by_content):
                    continue  # the same file by its content, whatever the spelling of its path
                if saved.get(key) != value:
                    raise UserError(f"{self.dir} holds rollouts made with {key}={saved.get(key)!r}, but this "
                                    f"run has {key}={value!r}; use another --out, or remove {self.dir} to "
                                    "start over")
        else:
            with atomic_write(path) as fh:
                json.dump(self.settings, fh, indent=1, sort_keys=True)
                fh.write("\n")
        finished: dict[str, dict] = {}
        where: dict[str, str] = {}
        for shard in self.shards():
            for rec in read_records(shard):
                if rec["id"] in finished and rec == finished[rec["id"]]:
                    continue  # the same question written twice (two runs before the lock): identical
                if rec["id"] in finished:
                    raise UserError(f"{shard}: question {rec['id']!r} is also in {where[rec['id']]}; remove "
                                    f"one of the two shards")
                finished[rec["id"]] = rec
                where[rec["id"]] = shard
        return finished

    def shards(self) -> list[str]:
        """Every shard file of the folder, in name order."""
        return sorted(p for p in glob.glob(os.path.join(self.dir, "rank*-of-*.*.jsonl"))
                      if _SHARD.search(os.path.basename(p)))

    def _next_path(self) -> str:
        prefix = f"rank{self.rank}-of-{self.world_size}."
        used = [int(_SHARD.search(os.path.basename(p)).group(3)) for p in self.shards()
                if os.path.basename(p).startswith(prefix)]
        return os.path.join(self.dir, f"{prefix}{max(used, default=-1) + 1:05d}.jsonl")

    def add(self, record: dict) -> None:
        """Keep a finished question's record; a shard is written every ``shard_size`` of them."""
        self._buffer.append(record)
        if len(self._buffer) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        """Write the kept records as one shard (nothing when none is kept)."""
        if not self._buffer:
            return
        write_records(self._buffer, self._next_path())
        self._buffer = []

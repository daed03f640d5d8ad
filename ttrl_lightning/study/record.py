"""A study's record: one JSON file, ``<out>/study.json``, written atomically after every finished step (a start's
build or evaluation, a run), so that an interrupted study loses at most the step in progress.

Rules (never a silent loss):

* **Never wiped.** A record is opened to resume it (``--resume``), to read it (``--report-only``) or, with
  ``--restart``, moved aside to ``study.<UTC time>.json`` beside it, never deleted. A study started where a
  record exists without either flag is refused in one line naming both.
* **Bound to its spec.** The record holds the spec's :meth:`~.spec.StudySpec.identity` (everything that
  changes a number) and every arm's definition. A resume with another identity, or an arm of the same name with
  other overrides, is refused in one line naming the first field that differs. Arms and seeds may be added.
* **Bound to its start by digest.** A start is compared by the digest of its weights (``study.digest``), not by
  its path: a start rebuilt with other weights (another machine's float kernels) is refused, naming both digests.
* A run is in the record only when it finished; one killed mid-way is absent, and redone on resume.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

from ..errors import UserError
from ..safe_files import atomic_write
from .spec import StudySpec

__all__ = ["RecordError", "StudyRecord", "first_difference", "RECORD_NAME", "RECORD_FORMAT"]

RECORD_NAME = "study.json"
#: the record's layout version
RECORD_FORMAT = 1


class RecordError(UserError):
    """A record that cannot be used as asked: the message names the file and what differs."""


def first_difference(old: Any, new: Any, where: str = "") -> str | None:
    """The dotted path of the first field where ``old`` and ``new`` differ, with both values; None if equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in old or key not in new:
                side = "the record" if key not in new else "this spec"
                return f"{where + '.' if where else ''}{key} (only in {'this spec' if key not in old else side})"
            found = first_difference(old[key], new[key], f"{where + '.' if where else ''}{key}")
            if found:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if old == new else f"{where or '<root>'} (record: {old!r}, this spec: {new!r})"


class StudyRecord:
    """The record of one study (module docstring); ``data`` is its JSON document."""

    def __init__(self, path: str, data: dict):
        self.path = path
        self.data = data

    # -- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, spec: StudySpec, *, resume: bool = False, restart: bool = False, read_only: bool = False
             ) -> "StudyRecord":
        """The record of ``spec`` under ``spec.out``: a new one, the existing one checked against ``spec``
        (``resume``, ``read_only``), or a new one after moving the existing one aside (``restart``)."""
        if resume and restart:
            raise RecordError("--resume and --restart exclude each other")
        path = os.path.join(spec.out, RECORD_NAME)
        exists = os.path.exists(path)
        if read_only:
            if not exists:
                raise RecordError(f"{path}: no record to report (run the study first)")
            record = cls(path, cls._read(path))
            record.check(spec)
            return record
        if exists and restart:
            aside = cls._move_aside(path)
            print(f"--restart: the earlier record is kept as {aside}", flush=True)
        elif exists and not resume:
            raise RecordError(f"{path} already holds a record: --resume continues it, --restart moves it aside "
                              "and starts again")
        if exists and resume:
            record = cls(path, cls._read(path))
            record.check(spec)
            record.data["arms"].update({n: _arm(a) for n, a in spec.arms.items()})
            print(f"--resume: {path} holds {len(record.data['runs'])} finished runs", flush=True)
            return record
        return cls(path, {"format": RECORD_FORMAT, "study": spec.name, "identity": spec.identity(),
                          "arms": {n: _arm(a) for n, a in spec.arms.items()}, "questions": {}, "starts": {},
                          "runs": {}, "sittings": []})

    @staticmethod
    def _read(path: str) -> dict:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as e:
            raise RecordError(f"{path}: not a readable study record ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:160]}); --restart moves it aside")
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            raise RecordError(f"{path}: not a study record of format {RECORD_FORMAT}; --restart moves it aside")
        for key, kind in (("identity", dict), ("arms", dict), ("questions", dict), ("starts", dict), ("runs", dict),
                          ("sittings", list)):
            if not isinstance(data.get(key), kind):
                raise RecordError(f"{path}: a study record without its {key!r} {kind.__name__}; --restart moves it "
                                  "aside")
        return data

    @staticmethod
    def _move_aside(path: str) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        base, ext = os.path.splitext(path)
        aside, i = f"{base}.{stamp}{ext}", 1
        while os.path.exists(aside):
            aside, i = f"{base}.{stamp}-{i}{ext}", i + 1
        os.replace(path, aside)
        return aside

    def check(self, spec: StudySpec) -> None:
        """Refuse (one line) a record made from another spec: the identity, or an arm's definition."""
        diff = first_difference(self.data["identity"], spec.identity())
        if diff:
            raise RecordError(f"{self.path} was made from another spec: {diff}; --restart moves it aside")
        for name, arm in spec.arms.items():
            old = self.data["arms"].get(name)
            if old is not None and old != _arm(arm):
                raise RecordError(f"{self.path}: arm {name!r} was run with another definition: "
                                  f"{first_difference(old, _arm(arm), 'arms.' + name)}; rename the arm or --restart")

    # -- content -------------------------------------------------------------------------------------------
    def check_questions(self, digests: dict[str, dict]) -> None:
        """Bind the record to its splits' contents (``{split: {"n", "sha256", "ids"}}``) or refuse others."""
        old = self.data["questions"]
        if old:
            diff = first_difference({k: v["sha256"] for k, v in old.items()},
                                    {k: v["sha256"] for k, v in digests.items()})
            if diff:
                raise RecordError(f"{self.path}: the study's questions differ from the record's ({diff}): the "
                                  "question generator changed; --restart moves the record aside")
        self.data["questions"] = digests

    def check_start(self, start_seed: int, digest: str) -> None:
        """Bind start ``start_seed`` to the digest of its weights, or refuse other weights."""
        entry = self.data["starts"].setdefault(str(start_seed), {})
        old = entry.get("digest")
        if old is not None and old != digest:
            raise RecordError(f"{self.path}: start {start_seed} has other weights than the record's (digest "
                              f"{digest[:12]} vs {old[:12]}): its runs started elsewhere; --restart moves the record "
                              "aside")
        entry["digest"] = digest

    def start(self, start_seed: int) -> dict:
        return self.data["starts"].setdefault(str(start_seed), {})

    def save(self) -> None:
        """Write the record atomically. Under a lock, the runs and start evaluations that another process (a
        sweep agent running other arms of the same study) wrote meanwhile are merged in first, never lost."""
        import fcntl

        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(self.path):
                try:
                    other = self._read(self.path)
                except RecordError:
                    other = None
                if other is not None and other.get("identity") == self.data["identity"]:
                    for key, run in other["runs"].items():
                        self.data["runs"].setdefault(key, run)
                    for seed, start in other["starts"].items():
                        mine = self.data["starts"].setdefault(seed, {})
                        for eval_seed, ev in start.get("eval", {}).items():
                            mine.setdefault("eval", {}).setdefault(eval_seed, ev)
            with atomic_write(self.path) as fh:
                json.dump(self.data, fh, indent=1, allow_nan=False)
                fh.write("\n")


def _arm(arm) -> dict:
    return {"labeler": arm.labeler, "overrides": arm.overrides}

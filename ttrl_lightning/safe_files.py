"""Writes that lose nothing: every output file of the package goes through :func:`atomic_write`.

* The content is written to a unique temporary file in the target's directory (``.<name>.<random>.tmp``),
  flushed and fsynced, then renamed over the target with ``os.replace`` (atomic on POSIX). A reader sees the
  old file or the new one, never a truncated one; two writers of the same target never share a temporary
  file; a failure or an interrupt leaves the previous file untouched and removes the temporary.
* :func:`same_file` tells whether two spellings (relative, symlinked, ``./x`` vs ``x``) name one file, so a
  command can refuse to write its input onto itself before anything is opened for writing.
* :func:`partial_path` is where an interrupted run writes what it finished, beside a complete result of an
  earlier run instead of over it (``report.json`` -> ``report.partial.json``).
* :func:`disk_full_is_one_line` turns a write that found its disk full (``ENOSPC``, a quota, or the same
  hidden under torch's zip writer or safetensors' error) into a :class:`DiskFullError` naming the file.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from typing import IO, Iterator

from ttrl_lightning.errors import UserError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; on a clean exit it replaces ``path``.

    ``mode``: ``"w"`` (text, ``encoding``) or ``"wb"`` (bytes). On an exception (KeyboardInterrupt included)
    the temporary file is removed and ``path`` is left as it was. The file gets the permission bits of the
    file it replaces, or those a new file gets under the umask (``mkstemp``'s own 0600 never reaches ``path``).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    with _atomic_path(os.fspath(path)) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def _umask() -> int:
    try:  # Linux reports it without changing it
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _final_mode(path: str) -> int:
    """The permission bits ``path`` keeps: its own when it exists, else 0666 under the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def atomic_write_path(path: str | os.PathLike) -> "contextlib.AbstractContextManager[str]":
    """Like :func:`atomic_write` for writers that want a file *name* (e.g. ``pyarrow.parquet.write_table``,
    ``matplotlib.savefig``): yields the temporary path, renamed over ``path`` on a clean exit."""
    return _atomic_path(os.fspath(path))


def _owner() -> str:
    """``host-pid`` of this process, in its temporary files' names (safe in a file name)."""
    import socket

    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}"


_OWNER = _owner()


def _reset_owner_after_fork() -> None:
    global _OWNER
    _OWNER = _owner()


os.register_at_fork(after_in_child=_reset_owner_after_fork)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _remove_dead_temporaries(directory: str, base: str, ext: str) -> None:
    """Remove the temporary files of earlier writes of ``base + ext`` whose process was killed (SIGKILL, a power
    cut: no ``finally`` ran): those named for this host and a process id that is no longer running. Files of
    another host (a shared file system) or of a running process are left alone."""
    import re

    host = _OWNER.rsplit("-", 1)[0]
    pattern = re.compile(rf"\.{re.escape(base)}\.{re.escape(host)}-(\d+)\..*\.tmp{re.escape(ext)}")
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        m = pattern.fullmatch(name)
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


@contextlib.contextmanager
def _atomic_path(path: str) -> Iterator[str]:
    """A unique temporary file beside ``path`` (created by ``mkstemp``, named for this host and process), given
    the target's mode and renamed over ``path`` on a clean exit, removed on any exception: the one mechanism of
    both atomic writers. Temporaries of earlier writes of ``path`` by killed processes are removed first."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    base, ext = os.path.splitext(os.path.basename(path))
    _remove_dead_temporaries(directory, base, ext)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{base}.{_OWNER}.", suffix=f".tmp{ext}")
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _final_mode(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` name the same file (through links and other spellings); False when ``b``
    does not exist yet and its resolved path differs from ``a``'s."""
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return os.path.realpath(a) == os.path.realpath(b)


def partial_path(path: str | os.PathLike) -> str:
    """``dir/report.json`` -> ``dir/report.partial.json``: where an interrupted run writes its partial result."""
    base, ext = os.path.splitext(os.fspath(path))
    return f"{base}.partial{ext}"


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_sha256(path: str | os.PathLike) -> str:
    """The content identity of a checkpoint: a file's SHA-256, or for a folder the SHA-256 of the
    ``name<TAB>sha256`` lines of its regular, non-hidden files in name order (a Hugging Face folder: config,
    weights, tokenizer). Another model at the same path gets another value (about 1 s per GB to compute)."""
    import hashlib

    path = os.fspath(path)
    if not os.path.isdir(path):
        return file_sha256(path)
    digest = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not name.startswith(".") and os.path.isfile(full):
            digest.update(f"{name}\t{file_sha256(full)}\n".encode())
    return digest.hexdigest()


class DiskFullError(UserError):
    """A file could not be written because its disk (or the user's quota, or a file size limit) left no room:
    the user frees space or writes elsewhere; the previous file is kept (:func:`atomic_write`)."""


#: errno values of a write that found no room: no space left, a quota exceeded, a file too large
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
#: what torch's zip writer and safetensors say when a write of theirs failed (their errors carry no errno):
#: torch's ``inline_container.cc`` enforce failures ("file write failed", "unexpected pos 768 vs 662" where the
#: failed write left the file short), safetensors' ``StorageFull`` / ``os error 28``
_HIDDEN_WRITE_FAILURES = ("inline_container.cc", "file write failed", "PytorchStreamWriter failed", "StorageFull",
                          "QuotaExceeded", "os error 28", "os error 27", "os error 122", "No space left on device")


def _disk_full(error: BaseException) -> bool:
    if isinstance(error, OSError):
        return error.errno in DISK_FULL_ERRNOS
    return any(m in str(error) for m in _HIDDEN_WRITE_FAILURES)


@contextlib.contextmanager
def disk_full_is_one_line(path: str | os.PathLike, what: str = "file") -> Iterator[None]:
    """Run a write of ``path`` (``what`` names it in the message); a write that found no room (an ``OSError``
    of :data:`DISK_FULL_ERRNOS`, or torch's or safetensors' own error for a failed write, which carries no
    errno) is one :class:`DiskFullError` naming the file, the reason and the room left on its disk. Any other
    error passes."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - sorted by _disk_full, re-raised otherwise
        if not _disk_full(e):
            raise
        folder = os.path.dirname(os.path.abspath(path))
        try:
            room = f"{shutil.disk_usage(folder).free:,} bytes free on its disk"
        except OSError:
            room = "the room on its disk could not be read"
        if isinstance(e, OSError):
            reason = e.strerror or str(e)
        else:
            reason = "a write failed: " + " ".join(str(e).split("] ")[-1].split())[:120].strip(" .")
        raise DiskFullError(f"{os.fspath(path)}: the {what} could not be written ({reason}; {room}); free space "
                            "or write elsewhere (trainer.default_root_dir); the previous file is kept") from e

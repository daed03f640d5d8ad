"""Freed tensor memory goes back to the system: glibc's malloc keeps a large block it freed for reuse once its
dynamic mmap threshold has risen past it (it rises to the largest freed mmapped block, up to 32 MiB), so a
training step's activations stay resident through the next step's sampling: a SmolLM2-135M TTRL step held
6.9 GB while sampling, where its tensors need 2 GB (``benchmarks/ttrl_step_breakdown.py``).

``return_large_blocks`` fixes the threshold (``mallopt(M_MMAP_THRESHOLD)``, which also turns the dynamic rise
off): blocks of at least that size are mapped on allocation and unmapped when freed. Small blocks (a decode
step's per-layer tensors at a few hundred KB) stay on the heap, so the decode loop makes no extra system calls.
``TTRL_MMAP_THRESHOLD`` (bytes; 0 leaves glibc's dynamic rule) and glibc's own ``MALLOC_MMAP_THRESHOLD_``
take precedence; on a C library without ``mallopt`` (musl, macOS) nothing changes.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

from ttrl_lightning.errors import UserError

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt``
M_MMAP_THRESHOLD = -3
#: the fixed threshold: 1 MiB (glibc's starting value is 128 KiB, its dynamic ceiling 32 MiB)
DEFAULT_THRESHOLD = 1 << 20
ENV = "TTRL_MMAP_THRESHOLD"


def threshold_setting() -> int | None:
    """The threshold to set: ``TTRL_MMAP_THRESHOLD`` or :data:`DEFAULT_THRESHOLD`; None when glibc's own
    variable is set or ``TTRL_MMAP_THRESHOLD`` is 0. A value that is not a non-negative integer is a
    :class:`~ttrl_lightning.errors.UserError` naming it (one line from every command)."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return None
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_THRESHOLD
    if not raw.isdigit():
        raise UserError(f"{ENV} must be a number of bytes (0: glibc's dynamic threshold), got {raw!r}")
    return int(raw) or None


def return_large_blocks() -> int | None:
    """Set glibc's mmap threshold (:func:`threshold_setting`); returns the threshold set, None when nothing was
    set (not asked for, or no ``mallopt``)."""
    threshold = threshold_setting()
    if threshold is None:
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return threshold if mallopt(M_MMAP_THRESHOLD, threshold) == 1 else None

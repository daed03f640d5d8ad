"""Freed tensor memory back to the system, when asked for: glibc's malloc keeps a large block it freed for
reuse once its dynamic mmap threshold has risen past it (it rises to the largest freed mmapped block, up to
32 MiB), so a training step's activations stay resident through the next step's sampling: a SmolLM2-135M TTRL
step held 6.9 GB while sampling, where its tensors need 2 GB (``benchmarks/training/ttrl_step_breakdown.py``).

``TTRL_MMAP_THRESHOLD=<bytes>`` makes ``ttrl fit`` fix the threshold at its start (``return_large_blocks``:
``mallopt(M_MMAP_THRESHOLD)``, which also turns the dynamic rise off): blocks of at least that size are mapped
on allocation and unmapped when freed, smaller ones stay on the heap. It is off by default, because it costs
time: every mapped block is faulted in page by page when it is first written, so the lower the threshold, the
more of a step's memory is faulted in again each step. Measured on a quiet 2-core AVX2 machine (float32,
SmolLM2, ``configs/ttrl/real_smollm2.yaml``):

* the breakdown (8 questions x 8 votes, 3 steps after 1, one run each; the host's GEMM rate moved by up to 20%
  between runs): glibc's rule 23.5 s a step, peak 7.1 GB, 6.5 GB while sampling; 1 MiB 29.9 s, 5.8 GB, 2.9 GB;
  4 MiB 25.8 s, 6.1 GB, 3.1 GB; 32 MiB 23.0 s, 6.8 GB, 6.4 GB;
* the real-model benchmark (one 34-step majority run with its scan and evaluations): 1 MiB 1,445 s, peak
  6.6 GB; 4 MiB 1,163 s, 7.2 GB; glibc's rule (the commit before the setting existed) 958 s, 8.6 GB.

``TTRL_MMAP_THRESHOLD=4194304`` (4 MiB) is the setting to use where memory is short: about 1.4 GB less at the
peak and half the memory while sampling, for about 10-20% more time a step. glibc's own
``MALLOC_MMAP_THRESHOLD_`` takes precedence; on a C library without ``mallopt`` (musl, macOS) nothing changes.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

from ttrl_lightning.errors import UserError

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt``
M_MMAP_THRESHOLD = -3
#: the threshold to use where memory is short: 4 MiB (glibc's starting value is 128 KiB, its dynamic ceiling 32 MiB;
#: module docstring)
SAVING_THRESHOLD = 4 << 20
ENV = "TTRL_MMAP_THRESHOLD"
#: the largest threshold glibc takes (``DEFAULT_MMAP_THRESHOLD_MAX``: 32 MiB on a 64-bit system, 512 KiB x the
#: size of a ``long``); ``mallopt`` refuses a larger one, and one of 2^32 or more wrapped in its C ``int``
#: argument (4294967296 became 0: every allocation mapped)
MAX_THRESHOLD = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long)


def threshold_setting() -> int | None:
    """The threshold to set: ``TTRL_MMAP_THRESHOLD``; None (glibc's dynamic rule) when it is unset or 0, or when
    glibc's own variable is set. A value that is not a whole number of bytes in ASCII digits (``²`` and other
    Unicode digits are not), or that is above :data:`MAX_THRESHOLD`, is a
    :class:`~ttrl_lightning.errors.UserError` naming it (one line from every command): the threshold set is
    the one asked for, or none."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return None
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    shown = repr(raw) if len(raw) <= 40 else f"{raw[:12]!r}... ({len(raw):,} characters)"
    if not (raw.isascii() and raw.isdigit()):
        raise UserError(f"{ENV} must be a number of bytes (0: glibc's dynamic threshold), got {shown}")
    digits = raw.lstrip("0")
    if len(digits) > len(str(MAX_THRESHOLD)) or int(digits or "0") > MAX_THRESHOLD:
        raise UserError(f"{ENV} must be at most {MAX_THRESHOLD} bytes ({MAX_THRESHOLD >> 20} MiB, the largest mmap "
                        f"threshold glibc takes), got {shown}")
    return int(digits or "0") or None


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

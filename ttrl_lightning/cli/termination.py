"""SIGTERM handled as Ctrl-C: SLURM preemption, ``kill`` and ``timeout`` send SIGTERM, whose default action ends
the process at once (exit 143) without the cleanup an interrupt gets (``ttrl generate`` flushing its finished
questions, ``atomic_write`` removing its temporary file, ``ttrl bon`` writing its partial report).

``sigterm_as_interrupt()`` makes SIGTERM raise :class:`Terminated`, a ``KeyboardInterrupt``, so every
``except KeyboardInterrupt`` / ``finally`` that handles Ctrl-C handles it too; the ``ttrl`` dispatcher then
exits 143 (128 + SIGTERM) instead of 130.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "Terminated", "interrupt_exit", "sigterm_as_interrupt",
           "was_terminated"]

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM (raised where a Ctrl-C would be)."""


def interrupt_exit(error: KeyboardInterrupt | None) -> tuple[str, int]:
    """What a command stopped by ``error`` says and exits with: ``("terminated (SIGTERM)", 143)`` for
    :class:`Terminated`, else ``("interrupted", 130)``."""
    if isinstance(error, Terminated):
        return "terminated (SIGTERM)", EXIT_TERMINATED
    return "interrupted", EXIT_INTERRUPTED


#: set when SIGTERM arrived inside the current ``sigterm_as_interrupt`` block
_received = threading.Event()


def was_terminated() -> bool:
    """Whether SIGTERM arrived inside the current :func:`sigterm_as_interrupt` block: for code whose
    interrupt is caught by a library and comes back as another exception (Lightning's graceful shutdown ends
    in ``sys.exit(1)``), so it can raise :class:`Terminated` again and the command exits 143, not 130."""
    return _received.is_set()


def _raise_terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
    _received.set()
    raise Terminated()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (main thread only, where Python runs signal
    handlers); the previous handler comes back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

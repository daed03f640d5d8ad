"""A persistent worker process for symbolic answer comparison, killed and restarted when a call overruns.

A thread watchdog (``budget.time_limit``) stops Python-level work, but not work inside one C call: sympy's
big-integer arithmetic (``\\prod_{k=1}^{4000} k^{4000}``) holds the thread, and the interpreter, until it is
done, in any thread, and delays Ctrl-C as long. So :func:`.equivalence.answers_equal` sends its symbolic work
(:func:`.symbolic.compare_pair`) to a worker process and waits on a pipe:

* the worker applies the soft limit itself and answers ``"timeout"`` in the usual case;
* when no answer came ``KILL_GRACE_S`` after the budget, the worker is killed (``SIGKILL``), the call counts as
  a timeout, and a replacement starts at once, so that it is warm by the next call;
* waiting is a ``select`` on the pipe, so Ctrl-C and SIGTERM reach the caller at once (the worker, mid-call,
  is killed; it ignores SIGINT and runs in its own session, so a terminal's Ctrl-C never reaches it);
* workers are a small pool shared by the process's threads (one per concurrent caller); a forked child (a
  DataLoader worker) starts its own, and a worker exits when its parent's end of the pipe closes;
* a worker dies with its parent even mid-call, when its parent is killed (``SIGKILL``, the OOM killer) and no
  pipe closes in time: the kernel sends it ``SIGKILL`` when the thread that started it ends
  (``prctl(PR_SET_PDEATHSIG)``, Linux; set only for a worker started by the main thread, since another thread's
  end would kill a worker the process still uses), and a watchdog thread in the worker exits when its parent
  process is gone (between Python bytecodes: a stuck C call holds it, the kernel's signal does not wait).

Requests are ``(target, args)`` with ``target`` a ``"module:function"`` name; replies ``("ok", value)`` or
``("error", message)``. The pipes are private to the two processes (``pass_fds``), never a socket.
"""
from __future__ import annotations

import atexit
import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)

__all__ = ["WorkerUnavailable", "SymbolicWorkerPool", "default_pool", "KILL_GRACE_S", "STARTUP_TIMEOUT_S"]

#: seconds after a call's budget before its worker is killed (the soft limit answers well within this)
KILL_GRACE_S = 0.5
#: seconds a new worker may take to import math-verify and sympy and say it is ready
STARTUP_TIMEOUT_S = 60.0
#: idle workers kept per process (more concurrent callers start more, which are closed when idle)
MAX_IDLE = 4
#: seconds between a worker's checks that its parent process is alive
WATCHDOG_S = 0.5

DEFAULT_TARGET = "ttrl_lightning.answers.symbolic:compare_pair"
_ENTRY = "import sys; from ttrl_lightning.answers.symbolic_worker import main; main(sys.argv[1:])"


class WorkerUnavailable(RuntimeError):
    """No worker process could be started (or it died while starting)."""


class _Overran(Exception):
    pass


def _resolve(name: str):
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


class _Worker:
    """One worker process and its two pipes."""

    def __init__(self):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = dict(os.environ)
        # the parent's import path (a source checkout, pytest's rootdir), so the child imports the same package
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            main_thread = threading.current_thread() is threading.main_thread()
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, str(req_r), str(rep_w), str(os.getpid()), str(int(main_thread))],
                pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True, env=env)
        except OSError as err:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            raise WorkerUnavailable(f"could not start the answer-comparison worker ({sys.executable}): {err}") from err
        os.close(req_r)
        os.close(rep_w)
        self._send = Connection(req_w, readable=False)
        self._recv = Connection(rep_r, writable=False)
        self.ready = False
        self.pid = self.proc.pid

    def _reply(self, seconds: float):
        """The next reply within ``seconds``; raises :class:`_Overran` when none came, EOFError when the worker
        died. ``poll`` is a ``select``: a signal handler that raises (Ctrl-C) interrupts it at once."""
        if not self._recv.poll(max(seconds, 0.0)):
            raise _Overran
        return self._recv.recv()

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            reply = self._reply(STARTUP_TIMEOUT_S)
        except (_Overran, EOFError, OSError) as err:
            self.kill()
            raise WorkerUnavailable(f"the answer-comparison worker did not start within {STARTUP_TIMEOUT_S:g} s "
                                    f"({type(err).__name__})") from None
        if reply != ("ready", self.pid):
            self.kill()
            raise WorkerUnavailable(f"the answer-comparison worker answered {reply!r} instead of ready")
        self.ready = True

    def call(self, target: str, args: tuple, seconds: float):
        """Send one request to a ready worker; its reply within ``seconds`` (``_reply``)."""
        self._send.send((target, args))
        return self._reply(seconds)

    def kill(self) -> None:
        """Close the pipes, kill the worker and reap it."""
        for conn in (self._send, self._recv):
            try:
                conn.close()
            except OSError:
                pass
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


class SymbolicWorkerPool:
    """Worker processes shared by this process's threads; see the module docstring."""

    def __init__(self, target: str = DEFAULT_TARGET):
        self.target = target
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.kills = 0
        self.started = 0
        self.unavailable: str | None = None  # why no worker can be started here (then none is tried again)

    def _new(self) -> _Worker:
        if self.unavailable is not None:
            raise WorkerUnavailable(self.unavailable)
        try:
            worker = _Worker()
        except WorkerUnavailable as err:
            self.unavailable = str(err)
            raise
        self.started += 1
        return worker

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._new()

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(worker)
                return
        worker.kill()

    def call(self, args: tuple, seconds: float, target: str | None = None):
        """``target(*args)`` in a worker. Returns ``(True, value)``, or ``(False, None)`` when no reply came
        within ``seconds`` (the worker was killed and a replacement started).

        Raises:
            WorkerUnavailable: no worker could be started.
            RuntimeError: the function raised in the worker (its message).
        """
        worker = self._take()
        try:
            try:
                worker.wait_ready()
            except WorkerUnavailable as err:
                self.unavailable = str(err)
                raise
            reply = worker.call(target or self.target, args, seconds)
        except _Overran:
            worker.kill()
            self.kills += 1
            logger.debug("answer-comparison worker %d killed after %g s", worker.pid, seconds)
            try:
                self._give_back(self._new())  # warm by the next call
            except WorkerUnavailable:
                pass
            return False, None
        except EOFError:
            worker.kill()
            raise WorkerUnavailable("the answer-comparison worker exited during a call") from None
        except BaseException:  # an interrupt, or a worker that could not start: its state is unknown
            worker.kill()
            raise
        self._give_back(worker)
        status, value = reply
        if status == "error":
            raise RuntimeError(f"answer comparison failed in its worker: {value}")
        return True, value

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's workers without touching them (they serve the parent)."""
        self._idle = []
        self._lock = threading.Lock()
        self.unavailable = None


_POOL: SymbolicWorkerPool | None = None
_POOL_LOCK = threading.Lock()


def default_pool() -> SymbolicWorkerPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = SymbolicWorkerPool()
        return _POOL


def _after_fork_in_child() -> None:
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    if _POOL is not None:
        _POOL.forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_default_pool() -> None:
    if _POOL is not None:
        _POOL.close()


def _die_with_parent(parent: int, started_by_main_thread: bool) -> None:
    """Exit when the parent process ``parent`` is gone (module docstring): the kernel's parent-death signal where
    it is safe, and a watchdog thread that polls the parent's pid."""
    if started_by_main_thread and sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_S)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def main(argv: list[str]) -> None:
    """The worker: answer requests until the parent closes its end, or the parent dies."""
    if len(argv) >= 4:
        _die_with_parent(int(argv[2]), argv[3] == "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = Connection(int(argv[0]), writable=False)
    replies = Connection(int(argv[1]), readable=False)
    compare = _resolve(DEFAULT_TARGET)
    compare("1/2", "0.5", STARTUP_TIMEOUT_S)  # import and warm math-verify and sympy before saying ready
    try:
        replies.send(("ready", os.getpid()))
    except (BrokenPipeError, OSError):  # the parent (a DataLoader worker) exited while this one started
        return
    functions = {DEFAULT_TARGET: compare}
    while True:
        try:
            target, args = requests.recv()
        except (EOFError, OSError):
            return
        try:
            function = functions.get(target) or functions.setdefault(target, _resolve(target))
            reply = ("ok", function(*args))
        except Exception as err:  # noqa: BLE001 - reported to the caller, who raises it
            reply = ("error", f"{type(err).__name__}: {err}")
        try:
            replies.send(reply)
        except (BrokenPipeError, OSError):
            return

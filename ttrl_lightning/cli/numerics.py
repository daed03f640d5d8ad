"""Portable CPU numerics for ``ttrl demo``: the same float results, and so the same table, on every x86-64 CPU
with AVX2 (AVX2, AVX-512 and AMX machines alike).

Why: PyTorch picks its vectorised CPU kernels for the machine (``ATEN_CPU_CAPABILITY``: avx2, avx512, ...), and
MKL picks its own; their reductions group the sums differently, so one seed and one commit trained a different
SFT model on another CPU (measured: the demo's SFT checkpoint under ``ATEN_CPU_CAPABILITY=avx2`` and ``=avx512``
on one machine has different weights), and every figure after it moved.

So the demo runs under :data:`PORTABLE_ENV`: PyTorch's AVX2 kernels on every CPU that has them, MKL's
conditional numerical reproducibility at AVX2 (``MKL_CBWR=AVX2``), oneDNN's kernels capped at AVX2
(``ONEDNN_MAX_CPU_ISA=AVX2``: PyTorch runs convolutions through oneDNN, which picks its kernels by the CPU's ISA
whatever ``ATEN_CPU_CAPABILITY`` says; the vision tower's patch embedding of the VLM demo is a ``Conv3d``), and a
fixed thread count (the split of a parallel reduction depends on it). The variables must be set before PyTorch and MKL start, so
:func:`run_portable` runs the command again in a child process with them and passes its output and exit
code through; a process that already runs under them (:func:`is_portable`) goes on. ``--numerics native``
keeps the machine's own kernels (faster on AVX-512, and machine-specific).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

__all__ = ["PORTABLE_ENV", "is_portable", "run_portable", "numerics_report"]

#: the environment of portable numerics (module docstring)
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def is_portable(env=None) -> bool:
    """Whether ``env`` (default: this process's) holds every variable of :data:`PORTABLE_ENV`."""
    env = os.environ if env is None else env
    return all(env.get(k) == v for k, v in PORTABLE_ENV.items())


def run_portable(argv: list[str]) -> int:
    """Run ``ttrl <argv>`` in a child process under :data:`PORTABLE_ENV`, on this process's terminal (its
    progress bars as they are); returns its exit code (130 when interrupted: the child gets the same Ctrl-C
    and cleans up)."""
    cmd = [sys.executable, "-m", "ttrl_lightning.cli", *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(cmd, env={**os.environ, **PORTABLE_ENV})
    try:
        return proc.wait()
    except KeyboardInterrupt:  # a terminal's Ctrl-C reached the child too; a signal to this process alone did not
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.wait()
        return 130


def numerics_report() -> dict:
    """What this process computes with: the kernel level PyTorch runs, the pinned variables, the threads. A
    CPU without AVX2 runs other kernels than asked for (``cpu_capability`` says which), and its figures may
    differ from the README's."""
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
            **{k: os.environ.get(k) for k in PORTABLE_ENV}}

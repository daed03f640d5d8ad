"""Peak-memory and timing helpers for the signal-op benchmarks (token_stats.py, attention_mass.py).

CPU: each candidate runs in its own worker process; the peak resident set is reset through
``/proc/self/clear_refs`` (writing "5" resets VmHWM, Linux >= 4.0) once the inputs exist, so
``VmHWM - VmRSS(before)`` is the peak *extra* memory of the call alone. CUDA: ``torch.cuda`` peak stats.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def measure(fn, device: str = "cpu", repeats: int = 3) -> dict:
    """Run ``fn()`` once for peak extra memory, then ``repeats`` more times for wall-clock time."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() - base
    else:
        if not reset_peak_rss():
            raise RuntimeError("cannot reset the peak RSS (/proc/self/clear_refs); CPU memory needs Linux")
        base = _status_kib("VmRSS") * 1024
        t0 = time.perf_counter()
        fn()
        first = time.perf_counter() - t0
        peak = _status_kib("VmHWM") * 1024 - base
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"peak_extra_bytes": int(peak), "first_s": first, "times_s": times,
            "median_s": statistics.median(times) if times else first, "min_s": min(times) if times else first}


def run_worker(script: str, args: list[str], timeout: float = 1800) -> dict:
    """Run ``script --worker ...`` in a fresh process and parse the JSON line it prints last."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [os.path.dirname(os.path.dirname(os.path.abspath(script))),
                               os.environ.get("PYTHONPATH", "")])})
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mib(n: int) -> float:
    return n / 2**20


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(payload, fh, indent=2)
    print(f"wrote {path}")

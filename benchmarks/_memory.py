"""Peak-memory and timing helpers for the signal-op benchmarks (token_stats.py, attention_mass.py).

Memory: each candidate runs once in its own worker process; on CPU the peak resident set is reset through
``/proc/self/clear_refs`` (writing "5" resets VmHWM, Linux >= 4.0) once the inputs exist, so
``VmHWM - VmRSS(before)`` is the peak *extra* memory of the call alone; on CUDA the ``torch.cuda`` peak stats.
Time: all candidates in one process, called in turns, so background load is shared fairly.
"""
from __future__ import annotations

import argparse

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


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def peak_extra_memory(fn, device: str = "cpu") -> dict:
    """Peak extra memory of one ``fn()`` call (run it in a fresh process) and that call's wall-clock time."""
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
    return {"peak_extra_bytes": int(peak), "first_s": first}


def time_interleaved(fns: dict, device: str = "cpu", repeats: int = 5) -> dict:
    """Wall-clock times of several candidates measured in turns (A B C, B C A, ...) in one process, so that
    background load on a shared machine hits all of them alike. One warm-up call each first."""
    names = list(fns)
    for name in names:
        fns[name]()
    _sync(device)
    times = {name: [] for name in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            _sync(device)
            t0 = time.perf_counter()
            fns[name]()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: {"times_s": ts, "median_s": statistics.median(ts), "min_s": min(ts)} for name, ts in times.items()}


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


def measure_candidates(script: str, names: list[str], common: list[str]) -> tuple[dict, dict]:
    """Peak extra memory of each candidate in its own worker process, then one worker that times all the
    candidates that ran, in interleaved rounds (fair under background load). Candidates that cannot run
    here (missing backend, no GPU) are skipped with a line saying why.

    Returns ``(results, timing)``: ``results[name]`` holds the memory and timing fields of one candidate.
    """
    results = {}
    for name in names:
        try:
            results[name] = run_worker(script, common + ["--worker", name])
        except RuntimeError as e:
            print(f"[skip] {name}: {str(e).strip().splitlines()[-1]}")
    if not results:
        raise SystemExit("no candidate ran")
    timing = run_worker(script, common + ["--worker", "timing", "--names", ",".join(results)])
    for name, r in results.items():
        r.update(timing[name])
    return results, timing


def add_protocol_args(p, candidates: dict, repeats: int, out: str) -> None:
    """The options every kernel benchmark shares: device, dtype, timing rounds, seed, candidate subset,
    output JSON, and the hidden options its worker processes are started with."""
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--repeats", type=int, default=repeats, help="timing rounds (each candidate once per round)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--candidates", default=None, help="comma-separated subset of " + str(candidates))
    p.add_argument("--out", default=out)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--names", default="", help=argparse.SUPPRESS)


def protocol_argv(args) -> list[str]:
    """The shared options of :func:`add_protocol_args` as worker command-line arguments."""
    return ["--device", args.device, "--dtype", args.dtype, "--repeats", str(args.repeats), "--seed", str(args.seed)]

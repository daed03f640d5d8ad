"""What the benchmarks share. Each benchmark is a module run from the repository root (``python -m
benchmarks.<kind>.<name>``) and imports these from here; none edits ``sys.path``.

* **Verdicts** (``paired_ratios``, ``paired_verdict``): the rule every benchmark that prints PASS / FAIL
  follows on timings. The candidates run in turns (interleaved rounds), so each round gives a paired ratio:
  candidate over baseline, measured under the same background load. A busy machine moves single timings by
  more than the margins the benchmarks test (two runs of ``engines/generate_signals.py`` under load 2.9 once
  printed +178% and -59% overhead), so a verdict is printed only when every round's ratio lies on the same
  side of the margin; when the rounds' spread straddles it, the line says so and gives the spread instead.
* **Provenance** (``cpu_features``, ``git_commit``, ``peak_rss_gb``, ``provenance``): where a benchmark's
  figures come from, recorded in every long benchmark's JSON (a figure is only comparable on the same CPU
  kind).
* **Memory and timing of the kernel benchmarks** (``kernels/token_stats.py``, ``attention_mass.py``,
  ``train_logprobs.py``) and their side-by-side ratio report. Memory: each candidate runs once in its own
  worker process (``run_worker``: the benchmark's module again, ``--worker NAME``); on CPU the peak resident
  set is reset through ``/proc/self/clear_refs`` (writing "5" resets VmHWM, Linux >= 4.0) once the inputs
  exist, so ``VmHWM - VmRSS(before)`` is the peak *extra* memory of the call alone; on CUDA the
  ``torch.cuda`` peak stats. Time: all candidates in one process, called in turns, so background load is
  shared fairly.
* ``write_json``: a report written through a temporary file renamed into place.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

from ttrl_lightning.hardware import cpu_features  # noqa: F401  (re-exported: every benchmark records it)
from ttrl_lightning.provenance import git_commit, peak_rss_gb, provenance  # noqa: F401  (re-exported)

#: the repository root: a worker runs with it on its import path
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def paired_ratios(candidate_s: list[float], baseline_s: list[float]) -> list[float]:
    """Round-by-round ratios ``candidate / baseline`` of two timing lists measured in the same rounds."""
    if len(candidate_s) != len(baseline_s) or not candidate_s:
        raise ValueError(f"paired timings need the same number of rounds (>= 1), got {len(candidate_s)} and "
                         f"{len(baseline_s)}")
    return [a / b for a, b in zip(candidate_s, baseline_s)]


def paired_verdict(ratios: list[float], margin: float, at_least: bool = True) -> str:
    """``at_least``: PASS when every ratio is >= ``margin`` (a speed-up), FAIL when every one is below it;
    otherwise (``at_least=False``, a cost bound): PASS when every ratio is <= ``margin``, FAIL when every one
    is above. Anything else is "no verdict" with the rounds' spread."""
    if not ratios:
        raise ValueError("no rounds to judge")
    ok = [(r >= margin) if at_least else (r <= margin) for r in ratios]
    side = ">=" if at_least else "<="
    spread = f"[{min(ratios):.3g}, {max(ratios):.3g}]"
    if all(ok):
        return f"PASS (every round {side} {margin:g}x; spread {spread})"
    if not any(ok):
        return f"FAIL (no round {side} {margin:g}x; spread {spread})"
    return f"no verdict: the rounds' spread {spread} straddles {margin:g}x"


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
        # collect first and not during the call: garbage freed mid-call would lower the resident set below
        # ``base`` and hide part of the call's own peak
        gc.collect()
        gc.disable()
        try:
            if not reset_peak_rss():
                raise RuntimeError("cannot reset the peak RSS (/proc/self/clear_refs); CPU memory needs Linux")
            base = _status_kib("VmRSS") * 1024
            t0 = time.perf_counter()
            fn()
            first = time.perf_counter() - t0
            peak = _status_kib("VmHWM") * 1024 - base
        finally:
            gc.enable()
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
    return {name: {"times_s": ts, "median_s": statistics.median(ts), "min_s": min(ts)}
            for name, ts in times.items()}


def run_worker(module: str, args: list[str], timeout: float = 1800) -> dict:
    """Run ``python -m module --worker ...`` in a fresh process (the repository root first on its import path)
    and parse the JSON line it prints last. ``module``: the benchmark's own module name (``__spec__.name``)."""
    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])})
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mib(n: int) -> float:
    return n / 2**20


def write_json(path: str, payload: dict) -> None:
    """Write a benchmark's JSON report through a temporary file renamed into place (never half-written)."""
    from ttrl_lightning.safe_files import atomic_write

    with atomic_write(path) as fh:
        json.dump(payload, fh, indent=2)
    print(f"wrote {path}")


def measure_candidates(module: str, names: list[str], common: list[str]) -> tuple[dict, dict]:
    """Peak extra memory of each candidate in its own worker process, then one worker that times all the
    candidates that ran, in interleaved rounds (fair under background load). Candidates that cannot run
    here (missing backend, no GPU) are skipped with a line saying why.

    Returns ``(results, timing)``: ``results[name]`` holds the memory and timing fields of one candidate.
    """
    results = {}
    for name in names:
        try:
            results[name] = run_worker(module, common + ["--worker", name])
        except RuntimeError as e:
            print(f"[skip] {name}: {str(e).strip().splitlines()[-1]}")
    if not results:
        raise SystemExit("no candidate ran")
    timing = run_worker(module, common + ["--worker", "timing", "--names", ",".join(results)])
    for name, r in results.items():
        r.update(timing[name])
    return results, timing


def add_protocol_args(p, candidates: dict, repeats: int, out: str) -> None:
    """The options every kernel benchmark shares: device, dtype, timing rounds, seed, candidate subset,
    output JSON, and the hidden options its worker processes are started with."""
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--repeats", type=int, default=repeats,
                   help="timing rounds (each candidate once per round)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--candidates", default=None, help="comma-separated subset of " + str(candidates))
    p.add_argument("--out", default=out)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--names", default="", help=argparse.SUPPRESS)


def protocol_argv(args) -> list[str]:
    """The shared options of :func:`add_protocol_args` as worker command-line arguments."""
    return ["--device", args.device, "--dtype", args.dtype, "--repeats", str(args.repeats),
            "--seed", str(args.seed)]


def report_ratios(title: str, results: dict, mem_target: float, time_target: float,
                  baseline: str = "materialised") -> None:
    """Print the side-by-side table (peak extra MiB, median s, both as ratios to ``baseline``), a
    ``[MISMATCH]`` line for every ``check`` statistic that differs from the baseline's by more than 1e-3
    (relative), and per candidate whether memory <= ``mem_target`` and time <= ``time_target`` of the
    baseline (time: ``_verdict.paired_verdict`` over the paired rounds). Adds ``mem_ratio``, ``time_verdict``
    and ``time_ratio`` to each result (NaN without a baseline)."""
    base = results.get(baseline)
    print(f"\n{title}")
    print(f"{'candidate':<16}{'peak extra MiB':>16}{'median s':>11}{'mem / base':>12}{'time / base':>13}")
    for name, r in results.items():
        r["mem_ratio"] = r["peak_extra_bytes"] / base["peak_extra_bytes"] if base else float("nan")
        r["time_ratio"] = r["median_s"] / base["median_s"] if base else float("nan")
        print(f"{name:<16}{mib(r['peak_extra_bytes']):>16.1f}{r['median_s']:>11.3f}{r['mem_ratio']:>12.4f}"
              f"{r['time_ratio']:>13.3f}")
    if not base:
        return
    for name, r in results.items():
        for stat, value in r["check"].items():
            want = base["check"][stat]
            if abs(value - want) > 1e-3 * max(1.0, abs(want)):
                print(f"[MISMATCH] {name} {stat}: {value} vs baseline {want}")
    for name, r in results.items():
        if name == baseline:
            continue
        mem_ok = r["mem_ratio"] <= mem_target  # peak memory is deterministic: one measurement decides
        r["time_verdict"] = paired_verdict(paired_ratios(r["times_s"], base["times_s"]), time_target,
                                           at_least=False)
        print(f"target {name}: memory <= 1/{1 / mem_target:.0f} of baseline: {'PASS' if mem_ok else 'FAIL'} "
              f"({1 / r['mem_ratio']:.1f}x less); time <= {time_target}x ({r['time_ratio']:.3f}x of medians, "
              f"paired rounds): {r['time_verdict']}")


def report_auto_backend(op: str, args, results: dict) -> None:
    """Print the backend ``op`` picks automatically on ``args.device`` and write the JSON report to
    ``args.out`` (config, that backend, every candidate's results)."""
    from ttrl_lightning.ops import selected_backend

    auto = selected_backend(op, args.device)
    print(f"auto backend for {op} on {args.device}: {auto}")
    write_json(args.out, {"config": vars(args), "auto_backend": auto, "results": results})

"""Where a benchmark's figures come from: the commit, the CPU's float features and the peak resident memory,
recorded in every long benchmark's JSON (a figure is only comparable on the same CPU kind)."""
from __future__ import annotations

import os
import resource
import subprocess


def cpu_features() -> dict:
    """The CPU's model name and its float features, from /proc/cpuinfo (Linux)."""
    flags: set[str] = set()
    name = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("model name") and name == "unknown":
                    name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"model": name, "cores": os.cpu_count(), "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
            "amx_tile": "amx_tile" in flags}


def git_commit() -> str | None:
    """The checkout's commit (with ``+dirty`` when tracked files differ from it), None outside a git checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=here, timeout=30)
        if head.returncode:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=here, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def peak_rss_gb() -> float:
    """This process's peak resident memory in GB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def provenance() -> dict:
    """``{commit, cpu}`` of this run."""
    return {"commit": git_commit(), "cpu": cpu_features()}

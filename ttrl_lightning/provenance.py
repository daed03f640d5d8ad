"""Where a long job's figures come from: the commit, the CPU's float features and the peak memory, recorded in
every study's and long benchmark's JSON (a figure is only comparable on the same CPU kind)."""
from __future__ import annotations

import os
import resource
import subprocess

from .hardware import cpu_features

__all__ = ["git_commit", "peak_rss_gb", "provenance"]


def git_commit(ignore: str | None = None, where: str | None = None) -> str | None:
    """The commit of the checkout holding ``where`` (default: this project's), with ``+dirty`` when tracked files
    differ from it; None outside a git checkout. ``ignore``: a file or folder whose changes do not count (a
    benchmark's own output folder, when its record is tracked and it writes it while it runs)."""
    here = where or os.path.dirname(os.path.abspath(__file__))
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True,
                             cwd=here, timeout=30)
        if top.returncode:
            return None
        root, head = top.stdout.splitlines()
        spec = []
        if ignore is not None:
            rel = os.path.relpath(os.path.realpath(os.path.abspath(ignore)), os.path.realpath(root))
            if rel != "." and not rel.startswith(".." + os.sep) and rel != "..":
                spec = ["--", ".", f":(exclude){rel}"]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", *spec],
                               capture_output=True, text=True, cwd=root, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head + ("+dirty" if dirty else "")


def peak_rss_gb() -> float:
    """This process's peak resident memory in GB of 2^30 bytes (GiB; Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def provenance(ignore: str | None = None) -> dict:
    """``{commit, cpu}`` of this run; ``ignore`` as :func:`git_commit`'s."""
    return {"commit": git_commit(ignore), "cpu": cpu_features()}

"""Triton kernels under the CPU interpreter. triton reads TRITON_INTERPRET when it is imported (it decorates
its own standard library, ``tl.zeros`` and the like, at import), so this check runs _backend_check.py in a
fresh interpreter; every other backend check runs in-process (test_backends.py)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
]


def test_triton_kernels_match_reference_in_interpreter():
    env = {k: v for k, v in os.environ.items() if k not in ("TTRL_KERNEL_IMPL", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "_backend_check.py"), "--backend", "triton", "--device", "cpu"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "triton backend on cpu matches the reference" in proc.stdout

"""Triton kernels under the CPU interpreter, in a subprocess so TRITON_INTERPRET=1 is set before triton loads."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton", reason="triton is not installed")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def test_triton_kernels_match_reference_in_interpreter():
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "_backend_check.py"), "--backend", "triton", "--device", "cpu"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "matches the reference" in proc.stdout

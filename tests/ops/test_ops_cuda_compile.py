"""The CUDA kernels compile with nvcc alone (they use no torch headers); skipped when nvcc is absent.

Running them needs a GPU: benchmarks/gpu_check.sh builds the extension and runs the correctness checks there.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = sorted(glob.glob(os.path.join(ROOT, "csrc", "**", "*_cuda.cu"), recursive=True))


def _nvcc():
    found = shutil.which("nvcc")
    if found is None and os.environ.get("CUDA_HOME"):
        cand = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
        found = cand if os.path.exists(cand) else None
    return found


def test_cuda_sources_exist():
    assert SOURCES, "no csrc/**/*_cuda.cu sources found"


@pytest.mark.parametrize("source", SOURCES, ids=[os.path.basename(s) for s in SOURCES])
def test_nvcc_compiles_kernels_for_sm90(source, tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or set CUDA_HOME to compile-check csrc/*.cu)")
    cmd = [nvcc, "-c", "-O3", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90", source,
           "-o", str(tmp_path / "kernels.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "error" not in proc.stderr.lower(), proc.stderr[-4000:]
    assert (tmp_path / "kernels.o").stat().st_size > 0

"""The CUDA kernels compile with nvcc alone (they use no torch headers) and the torch bindings type-check
against the installed torch headers; skipped when nvcc is absent.

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


def test_every_launcher_the_bindings_declare_is_defined_in_a_cuda_source():
    """What setup.py links (``csrc/**/*_cuda.cu`` + ``csrc/bindings_cuda.cpp``) fits together without nvcc:
    each ``extern "C"`` launcher the bindings declare is defined, with ``extern "C"`` linkage, in exactly one
    CUDA source, and each is called by a binding that ``m.def`` exports."""
    import re

    assert SOURCES, "no csrc/**/*_cuda.cu sources found"
    bindings = open(os.path.join(ROOT, "csrc", "bindings_cuda.cpp"), encoding="utf-8").read()
    declared = re.findall(r'extern "C" int (\w+)\(', bindings)
    assert declared, "the bindings declare no CUDA launcher"
    sources = {path: open(path, encoding="utf-8").read() for path in SOURCES}
    for name in declared:
        defined = [p for p, text in sources.items() if re.search(rf'extern "C" int {name}\([^;]*?\)\s*\{{', text, re.S)]
        assert len(defined) == 1, (name, defined)
        assert len(re.findall(rf"\b{name}\(", bindings)) >= 2, f"{name} is declared but never called"
    exported = re.findall(r'm\.def\("(\w+)"', bindings)
    assert set(exported) >= {"token_stats_partials", "attention_with_mass"}, exported


@pytest.mark.subprocess
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


def _cuda_include_dir():
    """The toolkit's include dir: $CUDA_HOME, $CUDA_PATH, torch's CUDA_HOME, next to nvcc, /usr/local/cuda."""
    from torch.utils import cpp_extension

    nvcc = _nvcc()
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), cpp_extension.CUDA_HOME,
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None, "/usr/local/cuda"]
    for root in filter(None, roots):
        if os.path.exists(os.path.join(root, "include", "cuda_runtime.h")):
            return os.path.join(root, "include")
    return None


@pytest.mark.subprocess
def test_cuda_bindings_compile_against_torch_headers(tmp_path):
    """csrc/bindings_cuda.cpp is type-checked (g++ -fsyntax-only) against the installed torch's headers and
    the CUDA runtime headers, so an ATen/c10 API mismatch shows here and not only on a GPU machine. A CPU
    build of torch ships the c10/cuda headers but not the generated ``cuda_cmake_macros.h``; a one-line
    stand-in is written to a temporary include dir in that case (it only selects export macros)."""
    from torch.utils import cpp_extension

    cxx = shutil.which("g++") or shutil.which("c++")
    cuda_inc = _cuda_include_dir()
    if cxx is None or cuda_inc is None:
        pytest.skip("needs a C++ compiler and the CUDA toolkit headers (cuda_runtime.h under CUDA_HOME)")
    torch_incs = cpp_extension.include_paths()
    extra = []
    macros = os.path.join("c10", "cuda", "impl", "cuda_cmake_macros.h")
    if not any(os.path.exists(os.path.join(p, macros)) for p in torch_incs):
        shim = tmp_path / "shim" / "c10" / "cuda" / "impl"
        shim.mkdir(parents=True)
        (shim / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        extra = ["-I" + str(tmp_path / "shim")]
    import sysconfig

    cmd = [cxx, "-fsyntax-only", "-std=c++17", "-DTORCH_EXTENSION_NAME=_C_cuda", *extra,
           *("-I" + p for p in torch_incs), "-I" + sysconfig.get_paths()["include"], "-I" + cuda_inc,
           os.path.join(ROOT, "csrc", "bindings_cuda.cpp")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]

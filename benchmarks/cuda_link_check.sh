#!/usr/bin/env bash
# Build csrc/ fully -- compile and link the CPU extension and the CUDA extension for sm_80 and sm_90 -- against a
# CUDA build of torch on a machine without a GPU, then read the CUDA module's symbol table and import it.
# The default test suite only type-checks the CUDA bindings (tests/ops/test_cuda_compile.py); this is the full
# build, run by hand (heavy: about 6 GB of disk for the venv, minutes of compiling).
#
#   bash benchmarks/cuda_link_check.sh              # scratch venv /tmp/ttrl_cuda_link, removed at the end
#   KEEP_VENV=1 TORCH_SPEC="torch==2.14.1" bash benchmarks/cuda_link_check.sh /tmp/my_venv
#
# Needs nvcc of the CUDA version the torch wheel was built for (torch 2.14.1 on PyPI is +cu130: nvcc 13.0).
# Builds in a temporary copy of the sources, so the checkout gets no .so. CXX_STD=c++XX replaces setup.py's
# -std=c++20 in that copy (torch 2.14's headers need C++20; setup.py passes it since they do). Exit code 0 when the CUDA module
# links, exports PyInit__C_cuda, was built for every requested architecture and imports with its functions.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${1:-/tmp/ttrl_cuda_link}
TORCH_SPEC=${TORCH_SPEC:-torch==2.14.1}
ARCHS=${TTRL_CUDA_ARCHS:-8.0;9.0}
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
created=0
cleanup() {
  rm -rf "$WORK"
  if [ "$created" = 1 ] && [ "${KEEP_VENV:-0}" != 1 ]; then rm -rf "$VENV"; fi
}
trap cleanup EXIT

command -v nvcc >/dev/null || { echo "nvcc not found: install the CUDA toolkit or put it on PATH"; exit 1; }
echo "== nvcc: $(nvcc --version | tail -n 1)"
# torch guesses CUDA_HOME from nvcc's folder; a wrapper such as /usr/local/bin/nvcc makes that /usr/local, which
# has no cuda_runtime.h: name the toolkit when the guess would be wrong
if [ -z "${CUDA_HOME:-}" ] && [ ! -f "$(dirname "$(dirname "$(command -v nvcc)")")/include/cuda_runtime.h" ] &&
   [ -f /usr/local/cuda/include/cuda_runtime.h ]; then
  export CUDA_HOME=/usr/local/cuda
fi
echo "== CUDA_HOME=${CUDA_HOME:-guessed by torch}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV with $TORCH_SPEC (free space: $(df -h --output=avail "$(dirname "$VENV")" | tail -n 1))"
  "$PY" -m venv "$VENV"
  created=1
  "$VENV/bin/pip" install -q "$TORCH_SPEC" setuptools wheel numpy
fi
"$VENV/bin/python" - <<'PY'
import torch
print("== torch", torch.__version__, "cuda", torch.version.cuda)
assert torch.version.cuda, "this torch is a CPU build: the CUDA extension cannot be built against it"
PY

cp -r csrc setup.py README.md requirements.txt requirements-dev.txt configs "$WORK"/
mkdir -p "$WORK/ttrl_lightning" && cp ttrl_lightning/__init__.py "$WORK/ttrl_lightning/"
cd "$WORK"
if [ -n "${CXX_STD:-}" ]; then
  sed -i "s/\"-std=c++20\"/\"-std=${CXX_STD}\"/g" setup.py
  echo "== setup.py copy: -std=c++20 replaced by -std=${CXX_STD}"
fi
echo "== building (TORCH_CUDA_ARCH_LIST=$ARCHS)"
t0=$SECONDS
TTRL_FORCE_CUDA_BUILD=1 TTRL_CUDA_ARCHS="$ARCHS" TORCH_CUDA_ARCH_LIST="$ARCHS" \
  "$VENV/bin/python" setup.py build_ext --inplace >build.log 2>&1 || {
    grep -m 8 "error" build.log
    grep -q "requires.*only available with .-std=c++20" build.log &&
      echo "FAIL: these torch headers need C++20 (setup.py passes -std=c++20 unless CXX_STD overrides it)"
    echo "cuda_link_check: FAIL (build)"
    exit 1
  }
echo "== built in $((SECONDS - t0))s"
echo "== compiler warnings: $(grep -c "warning" build.log || true)"

status=0
for mod in _C _C_cuda; do
  so=$(ls ttrl_lightning/${mod}.*.so 2>/dev/null | head -n 1)
  [ -n "$so" ] || { echo "FAIL: ttrl_lightning/${mod}*.so was not built"; status=1; continue; }
  echo "== $so: $(du -h "$so" | cut -f1)"
  exported=$(nm -D --defined-only "$so")  # (grep -q on a pipe would end nm early: a SIGPIPE under pipefail)
  grep -q " PyInit_${mod}$" <<<"$exported" && echo "   exports PyInit_${mod}" \
    || { echo "FAIL: $so does not export PyInit_${mod}"; status=1; }
  echo "   needs: $(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
done
so=$(ls ttrl_lightning/_C_cuda.*.so 2>/dev/null | head -n 1 || true)
if [ -n "$so" ]; then
  grep -q "\.nv_fatbin" <<<"$(readelf -S -W "$so")" && echo "   has a .nv_fatbin section (device code)" \
    || { echo "FAIL: no device code (.nv_fatbin) in $so"; status=1; }
  for arch in ${ARCHS//;/ }; do
    sm=${arch/./}
    grep -q -- "code=sm_${sm}" build.log && echo "   compiled for sm_${sm}" \
      || { echo "FAIL: nvcc was not asked for sm_${sm}"; status=1; }
  done
  echo "   undefined symbols resolved by: $(nm -D --undefined-only "$so" | wc -l) imports"
  "$VENV/bin/python" - <<'PY' || status=1
import torch  # loads libc10 / libtorch (and the CUDA runtime libraries) that the module links against
import ttrl_lightning._C_cuda as m
names = sorted(n for n in dir(m) if not n.startswith("_"))
print("== import without a GPU: ok; functions:", ", ".join(names))
assert {"token_stats_partials", "attention_with_mass"} <= set(names), names
print("   cuda available here:", torch.cuda.is_available())
PY
fi
[ $status = 0 ] && echo "cuda_link_check: PASS" || echo "cuda_link_check: FAIL"
exit $status

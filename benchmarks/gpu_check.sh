#!/usr/bin/env bash
# GPU check of the signal kernels, prepared to run as is on one H100/H200 (budget: under 8 minutes).
#   1. builds the CUDA extension in place against the machine's own torch (CPU extension skipped: not needed);
#   2. runs the Triton and CUDA correctness checks against ops/reference.py on the GPU;
#   3. runs benchmarks/token_stats.py and benchmarks/attention_mass.py on the GPU (bf16), whose baselines
#      include SDPA-flash and FlashAttention-2 when installed (target within 1.05x).
# Results (logs + JSON) go to $OUT (default outputs/gpu_check). Each step has its own timeout; a failing
# step is reported and the script goes on, exiting non-zero at the end if any step failed.
#
#   bash benchmarks/gpu_check.sh
#   TTRL_CUDA_ARCHS="8.0" bash benchmarks/gpu_check.sh   # A100
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python || command -v python3)}
OUT=${OUT:-outputs/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TTRL_CUDA_ARCHS=${TTRL_CUDA_ARCHS:-9.0}
export TORCH_CUDA_ARCH_LIST="$TTRL_CUDA_ARCHS"
export TTRL_FORCE_CUDA_BUILD=1 TTRL_SKIP_CPU_BUILD=1
export MAX_JOBS=${MAX_JOBS:-8}
failed=()

step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2
  shift 2
  echo "=== $name (timeout ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "=== $name: rc=$rc in $((SECONDS - t0))s"
  [ $rc -eq 0 ] || failed+=("$name(rc=$rc)")
}

$PY - <<'PY' 2>&1 | tee "$OUT/env.log"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
try:
    import triton; print("triton", triton.__version__)
except Exception as e: print("triton missing:", e)
try:
    import flash_attn; print("flash_attn", flash_attn.__version__)
except Exception as e: print("flash_attn missing:", e)
PY
command -v nvcc && nvcc --version | tail -n 1

# step timeouts sum to 465 s, so the whole script stays under 8 minutes even when a step hangs
step build_cuda_ext 120 $PY setup.py build_ext --inplace
step check_triton 60 $PY tests/ops/_backend_check.py --backend triton --device cuda
step check_cuda 45 $PY tests/ops/_backend_check.py --backend cuda --device cuda
step check_torch_gpu 30 $PY tests/ops/_backend_check.py --backend torch --device cuda
step bench_token_stats 90 $PY benchmarks/token_stats.py --device cuda --dtype bfloat16 --repeats 5 \
  --out "$OUT/token_stats.json"
step bench_attention_mass 120 $PY benchmarks/attention_mass.py --device cuda --dtype bfloat16 --repeats 10 \
  --candidates sdpa_no_mass,sdpa_flash_no_mass,flash_attn2_no_mass,eager_output_attentions,ours_triton,ours_cuda,ours_triton_half_T \
  --out "$OUT/attention_mass.json"

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu_check: all steps passed"

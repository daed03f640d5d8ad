#!/usr/bin/env bash
# GPU check of the signal kernels and the vLLM engine as one safe call on one H100/H200 (budget: under 10
# minutes, 560 s of steps).
# Needs only what a CUDA image with torch, triton and nvcc has, plus the wheels in .whl/ if any
# (benchmarks/gpu_wheels.txt, fetched here by benchmarks/gpu_wheels.sh; installed under /tmp, never into the
# image's environment). Steps, each with its own timeout, log and exit code:
#   A (in parallel) build_cuda_ext: the CUDA extension in place against the machine's torch (sm_90 by default);
#                   check_triton / check_torch: benchmarks/kernels/gpu_kernel_check.py (head dims 64-256, fp32/bf16/fp16,
#                   token_stats, linear_logprobs) plus tests/ops/_backend_check.py (odd small shapes);
#   B check_cuda:   the same checks for the extension built in A;
#   C bench_token_stats, bench_attention_mass, bench_generate_signals (bf16, one at a time: they time things);
#   D bench_vllm:   benchmarks/engines/rollout_engines.py on a random Llama (hidden 1024 x 8 layers), HF generate vs the
#                   colocated vLLM engine (needs the `vllm` package on the machine; bf16).
#   E vlm_recipe:   configs/ttrl/visconf_qwen2.5_vl_3b.yaml for 2 steps on 8 generated scene questions with a real
#                   Qwen2.5-VL checkpoint folder ($QWEN25_VL_DIR, default /models/Qwen2.5-VL-3B-Instruct) when
#                   the machine has one; otherwise it says so and passes (dry run: one step on tiny:qwen2_5_vl).
#   F vllm_vlm:     benchmarks/engines/vllm_vlm_probe.py: vLLM serves a tiny Qwen2-VL with an image, then the engine's image
#                   path (VLLMEngine, 2 scene questions x 4) against the policy's log-probs with the images (last:
#                   two vLLM start-ups; skipped, and reported, when the budget is spent).
# A step that would end past the budget is skipped and reported. Then one summary table (correctness per
# backend and dtype, the benchmarks' ratios: benchmarks/gpu_check_summary.py). Everything goes under $OUT
# (default outputs/gpu_check): summary.md, summary.json and logs.tar.gz (every step's log, rc and JSON); the
# exit code is non-zero when a step failed.
#
#   bash benchmarks/gpu_check.sh
#   GPU_CHECK_DRY_RUN=1 bash benchmarks/gpu_check.sh   # on a CPU machine: every step's plumbing, CPU-safe modes
#   TTRL_CUDA_ARCHS="8.0" bash benchmarks/gpu_check.sh   # A100
#
# Dry run: check_triton runs under the Triton interpreter and check_torch on the CPU, both with --quick; the
# benchmarks run on the CPU at toy sizes; build_cuda_ext and check_cuda (which need a CUDA torch and a GPU) print
# their exact commands. The summary table is produced from what ran.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
DRY=${GPU_CHECK_DRY_RUN:-0}
OUT=${OUT:-outputs/gpu_check}
BUDGET_S=${GPU_CHECK_BUDGET_S:-560}
LOGS="$OUT/logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TTRL_CUDA_ARCHS=${TTRL_CUDA_ARCHS:-9.0}
export TORCH_CUDA_ARCH_LIST="$TTRL_CUDA_ARCHS"
export TTRL_FORCE_CUDA_BUILD=1 TTRL_SKIP_CPU_BUILD=1
export MAX_JOBS=${MAX_JOBS:-8}
export TRITON_DEFAULT_FP_FUSION=${TRITON_DEFAULT_FP_FUSION:-1}
if [ "$DRY" = 1 ]; then DEV=cpu; QUICK=--quick; else DEV=cuda; QUICK=; fi

# carried wheels (benchmarks/gpu_wheels.txt): installed to a folder of their own, first on the path
if compgen -G ".whl/*.whl" >/dev/null; then
  WHL_CMD="$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site .whl/*.whl"
  if [ "$DRY" = 1 ]; then echo "dry run: would install the carried wheels: $WHL_CMD"
  else $WHL_CMD && export PYTHONPATH="/tmp/gpu_check_site:$PYTHONPATH" || echo "installing .whl/*.whl failed"; fi
fi

declare -A PIDS
# launch NAME TIMEOUT_S GPU_CMD [DRY_CMD]: start a step in the background; in a dry run DRY_CMD runs instead,
# or, when it is "echo", the exact GPU command is printed and the step is recorded as "dry"
launch() {
  local name=$1 limit=$2 cmd=$3 dry_cmd=${4:-echo}
  echo "$name" >>"$LOGS/steps"
  if [ "$DRY" = 1 ]; then
    if [ "$dry_cmd" = echo ]; then
      echo "=== $name: dry run, on a GPU this runs (timeout ${limit}s): $cmd" | tee "$LOGS/$name.log"
      echo dry >"$LOGS/$name.rc"
      return
    fi
    cmd=$dry_cmd
  fi
  if (( SECONDS + limit > BUDGET_S )); then
    echo "=== $name: skipped, it could end past the ${BUDGET_S}s budget (at ${SECONDS}s)" | tee "$LOGS/$name.log"
    echo skipped >"$LOGS/$name.rc"
    return
  fi
  echo "=== $name (timeout ${limit}s, at ${SECONDS}s): $cmd"
  ( timeout --kill-after=10 "$limit" bash -c "$cmd" >"$LOGS/$name.log" 2>&1; echo $? >"$LOGS/$name.rc" ) &
  PIDS[$name]=$!
}

# finish NAME...: wait for started steps and print each one's tail
finish() {
  local name
  for name in "$@"; do
    [ -n "${PIDS[$name]:-}" ] && wait "${PIDS[$name]}"
    unset "PIDS[$name]"
    if [ "$(cat "$LOGS/$name.rc" 2>/dev/null)" != dry ]; then
      tail -n 15 "$LOGS/$name.log"
      echo "=== $name: rc=$(cat "$LOGS/$name.rc" 2>/dev/null || echo missing) at ${SECONDS}s"
    fi
  done
}

# a check step: gpu_kernel_check.py for the backend, then the odd-shape backend check
check_cmd() {  # check_cmd BACKEND DEVICE QUICK
  echo "$PY -m benchmarks.kernels.gpu_kernel_check --backend $1 --device $2 $3 --out $LOGS/check_$1.json && " \
       "$PY tests/ops/_backend_check.py --backend $1 --device $2"
}

timeout 60 "$PY" - <<'PY' 2>&1 | tee "$LOGS/env.log"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "cc", f"{p.major}.{p.minor}", "shared_memory_per_block_optin",
          getattr(p, "shared_memory_per_block_optin", None))
else:
    print("device: none (CPU)")
for name in ("triton", "flash_attn", "transformers"):
    try:
        print(name, __import__(name).__version__)
    except Exception as e:
        print(name, "missing:", e)
PY
{ command -v nvcc && nvcc --version | tail -n 1; } 2>&1 | tee -a "$LOGS/env.log"

launch build_cuda_ext 150 "$PY setup.py build_ext --inplace"
launch check_triton 180 "$(check_cmd triton cuda "")" "$(check_cmd triton cpu --quick)"
launch check_torch 60 "$(check_cmd torch cuda "")" "$(check_cmd torch cpu --quick)"
finish build_cuda_ext check_triton check_torch

launch check_cuda 60 "$(check_cmd cuda cuda "")"
finish check_cuda

launch bench_token_stats 90 \
  "$PY -m benchmarks.kernels.token_stats --device cuda --dtype bfloat16 --repeats 5 --out $LOGS/token_stats.json" \
  "$PY -m benchmarks.kernels.token_stats --device cpu --M 64 --H 32 --V 2000 --repeats 1 --candidates materialised,fused_torch --out $LOGS/token_stats.json"
finish bench_token_stats
launch bench_attention_mass 120 \
  "$PY -m benchmarks.kernels.attention_mass --device cuda --dtype bfloat16 --repeats 10 --candidates sdpa_no_mass,sdpa_flash_no_mass,flash_attn2_no_mass,eager_output_attentions,ours_triton,ours_cuda,ours_triton_half_T --out $LOGS/attention_mass.json" \
  "$PY -m benchmarks.kernels.attention_mass --device cpu --T 128 --heads 2 --d 32 --repeats 1 --candidates sdpa_no_mass,ours_torch --out $LOGS/attention_mass.json"
finish bench_attention_mass
launch bench_generate_signals 120 \
  "$PY -m benchmarks.engines.generate_signals --device cuda --dtype bfloat16 --hidden 1024 --layers 8 --n 32 --out $LOGS/generate_signals.json" \
  "$PY -m benchmarks.engines.generate_signals --prompts 1 --n 2 --new-tokens 4 --repeats 1 --out $LOGS/generate_signals.json"
finish bench_generate_signals
launch bench_vllm 100 \
  "$PY -m benchmarks.engines.rollout_engines --device cuda --dtype bfloat16 --random-model 1024:8 --prompts 64 --n 16 --new-tokens 128 --rounds 2 --ttrl-steps 1 --workdir $LOGS/rollout_engines --out $LOGS/rollout_engines.json" \
  "$PY -m benchmarks.engines.rollout_engines --random-model 128:2 --prompts 2 --n 2 --new-tokens 4 --rounds 1 --ttrl-steps 1 --ttrl-questions 2 --workdir $LOGS/rollout_engines --out $LOGS/rollout_engines.json"
finish bench_vllm
VLM_DIR=${QWEN25_VL_DIR:-/models/Qwen2.5-VL-3B-Instruct}
TTRL="$PY -m ttrl_lightning.cli"
VLM_FIT="fit --config configs/ttrl/visconf_qwen2.5_vl_3b.yaml --data.init_args.path $LOGS/vlm_scenes/questions.jsonl --data.init_args.batch_size 4 --trainer.enable_progress_bar=false --trainer.default_root_dir $LOGS/vlm_recipe --trainer.logger lightning.pytorch.loggers.CSVLogger --trainer.logger.save_dir $LOGS/vlm_recipe"
SCENES="$PY -m ttrl_lightning.cli questions --task scenes --config '{\"kinds\": [\"colour\", \"shape\", \"count\"]}' --n 8 --out $LOGS/vlm_scenes/questions.jsonl"
launch vlm_recipe 90 \
  "if [ -d $VLM_DIR ]; then $SCENES && $TTRL $VLM_FIT --model.init_args.policy.model $VLM_DIR --trainer.max_steps 2 --model.init_args.sampling.max_new_tokens 128; else echo 'vlm_recipe: no Qwen2.5-VL checkpoint folder at $VLM_DIR (set QWEN25_VL_DIR): the recipe did not run'; fi" \
  "$SCENES && $TTRL $VLM_FIT --model.init_args.policy.model tiny:qwen2_5_vl --model.init_args.policy.dtype float32 --trainer.accelerator cpu --trainer.precision 32-true --trainer.max_steps 1 --model.init_args.sampling.max_new_tokens 8"
finish vlm_recipe
launch vllm_vlm 120 \
  "$PY -m benchmarks.engines.vllm_vlm_probe --device cuda --require --out $LOGS/vllm_vlm_probe.json" \
  "$PY -m benchmarks.engines.vllm_vlm_probe --out $LOGS/vllm_vlm_probe.json"
finish vllm_vlm

echo
echo "=== summary ($([ "$DRY" = 1 ] && echo "DRY RUN on CPU" || echo GPU), ${SECONDS}s)"
"$PY" benchmarks/gpu_check_summary.py "$LOGS" --out "$OUT/summary.md" --json "$OUT/summary.json"
failed=""
for name in $(cat "$LOGS/steps"); do
  case "$(cat "$LOGS/$name.rc" 2>/dev/null)" in 0|dry) ;; *) failed+="$name " ;; esac
done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
if [ -n "$failed" ]; then
  echo "gpu_check: FAILED or skipped steps: $failed(logs in $OUT/logs.tar.gz)"
  exit 1
fi
if [ "$DRY" = 1 ]; then
  echo "gpu_check: dry run passed (CPU-safe modes; the echoed steps did not run)"
else
  echo "gpu_check: all steps passed"
fi

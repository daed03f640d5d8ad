"""benchmarks/gpu_check.sh's plumbing on a CPU machine: ``GPU_CHECK_DRY_RUN=1`` runs each step in its CPU-safe
mode (Triton under its interpreter, the torch backend and the benchmarks on the CPU at toy sizes) or prints its
exact GPU command (the CUDA build and the CUDA check), and produces the summary table; a time budget that
nothing fits skips every step and fails the run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.sh")

pytestmark = pytest.mark.subprocess


def _run(tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("TTRL_KERNEL_IMPL", "TRITON_INTERPRET")}
    full.update(GPU_CHECK_DRY_RUN="1", OUT=str(tmp_path / "out"), PYTHON=sys.executable, **env)
    return subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=full, timeout=900, cwd=ROOT)


@pytest.mark.slow  # 40 s on a quiet machine, minutes under load: `make test-all` runs it
def test_dry_run_exercises_every_step_and_writes_the_summary(tmp_path):
    pytest.importorskip("triton", reason="triton is not installed")
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = tmp_path / "out"
    # what a remote GPU run hands back: few files, no deep folders
    assert sorted(os.listdir(out)) == ["logs.tar.gz", "summary.json", "summary.md"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == {"build_cuda_ext": "dry", "check_triton": "ok", "check_torch": "ok",
                                "check_cuda": "dry", "bench_token_stats": "ok", "bench_attention_mass": "ok",
                                "bench_generate_signals": "ok", "bench_vllm": "ok", "vllm_vlm": "ok",
                                "vlm_recipe": "ok"}
    rows = {(b, d): result for b, d, result, _ in summary["correctness"]}
    for dtype in ("float32", "bfloat16", "float16"):
        assert rows[("triton", dtype)].startswith("PASS") and "(cpu quick)" in rows[("triton", dtype)]
        assert rows[("torch", dtype)].startswith("PASS")
        assert rows[("cuda", dtype)] == "not run (dry run)"
    benches = {b: ratio for b, _, ratio, _ in summary["benchmarks"]}
    assert benches["token_stats"].startswith("memory ") and "time " in benches["token_stats"]
    assert benches["attention_mass"].startswith("time ") and "x paired" in benches["attention_mass"]
    assert benches["generate_signals"].startswith("time ") and "x paired" in benches["generate_signals"]
    assert benches["rollout_engines"].startswith("tokens/s ") and "x paired" in benches["rollout_engines"]
    # the image probe reports what vLLM did here: the engine check's gap where it serves a Qwen2-VL, else the stage
    assert benches["vllm_vlm"].startswith(("log-prob gap ", "no result (failed at ")), benches["vllm_vlm"]
    # the steps that cannot run here print their exact GPU command
    assert "on a GPU this runs (timeout 150s): " in proc.stdout and "setup.py build_ext --inplace" in proc.stdout
    assert "--backend cuda --device cuda" in proc.stdout
    assert "| triton | float32 | PASS" in proc.stdout  # the table is printed, not only written
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"logs/check_triton.json", "logs/check_torch.json", "logs/token_stats.json", "logs/attention_mass.json",
            "logs/build_cuda_ext.log", "logs/env.log"} <= names


def test_steps_past_the_time_budget_are_skipped_and_fail_the_run(tmp_path):
    proc = _run(tmp_path, GPU_CHECK_BUDGET_S="1")
    assert proc.returncode == 1, proc.stdout[-4000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"]["check_triton"] == "skipped" and summary["steps"]["bench_attention_mass"] == "skipped"
    assert summary["steps"]["build_cuda_ext"] == "dry"
    rows = {(b, d): result for b, d, result, _ in summary["correctness"]}
    assert rows[("torch", "float32")] == "not run (time budget)"
    assert "FAILED or skipped steps: check_triton check_torch" in proc.stdout

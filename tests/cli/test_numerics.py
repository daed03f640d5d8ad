"""Portable numerics (cli.numerics): the demo runs again under the pinned kernels, its output and exit code
passed through."""
from ttrl_lightning.cli.numerics import PORTABLE_ENV, is_portable, run_portable


def test_is_portable_needs_every_variable():
    assert is_portable(dict(PORTABLE_ENV))
    assert not is_portable({**PORTABLE_ENV, "ATEN_CPU_CAPABILITY": "avx512"})
    assert not is_portable({k: v for k, v in PORTABLE_ENV.items() if k != "MKL_CBWR"})


def test_the_child_runs_under_the_pinned_kernels(tmp_path, capfd):
    out = tmp_path / "q.jsonl"
    assert run_portable(["questions", "--task", "arith", "--n", "3", "--out", str(out)]) == 0
    assert f"wrote 3 distinct questions of arith (seed 0) to {out}" in capfd.readouterr().out
    assert run_portable(["questions", "--task", "nope", "--out", str(out)]) == 1  # the child's exit code
    assert "unknown task 'nope'" in capfd.readouterr().err  # its stderr, on this process's


def test_onednn_is_capped_at_avx2_under_portable_numerics():
    """PyTorch runs a convolution (the VLM's Conv3d patch embedding) through oneDNN, which picks its kernels by the
    CPU's ISA whatever ATEN_CPU_CAPABILITY says: the child's oneDNN reports AVX2 at most."""
    import subprocess
    import sys

    code = ("import torch; c = torch.nn.Conv3d(3, 4, (2, 14, 14), (2, 14, 14)); c(torch.randn(2, 3, 2, 14, 14))")
    env = {**__import__("os").environ, **PORTABLE_ENV, "ONEDNN_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    isa = [line for line in out.splitlines() if line.startswith("onednn_verbose") and ",isa:" in line]
    assert isa and "AVX-512" not in isa[0] and "AMX" not in isa[0], isa
    assert PORTABLE_ENV["ONEDNN_MAX_CPU_ISA"] == "AVX2"

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

"""cli.allocator: with TTRL_MMAP_THRESHOLD, glibc's mmap threshold fixed at `ttrl fit`'s start, so freed large
tensors leave the process (off by default: it costs time, the module's docstring has the figures). The effect is
measured in child processes (the setting is process-wide): large blocks freed between small live ones stay
resident under glibc's dynamic threshold and are returned under the fixed one."""
import json
import os
import subprocess
import sys

import pytest

from ttrl_lightning.cli import allocator
from ttrl_lightning.errors import UserError

CHILD = r"""
import json, sys, torch
from ttrl_lightning.cli.allocator import return_large_blocks
set_to = return_large_blocks()  # TTRL_MMAP_THRESHOLD decides: set in the "fixed" child only
def rss():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS")) / 1024
warm = torch.ones(4_000_000); del warm    # a 16 MB block freed: glibc's dynamic threshold rises past 8 MB
before = rss()
big, small = [], []
for _ in range(40):                        # 40 x 8 MB, a live 64 KB tensor after each
    big.append(torch.ones(2_000_000)); small.append(torch.ones(16_384))
grown = rss() - before
del big
print(json.dumps({"set": set_to, "grown": grown, "kept": rss() - before}))
"""


def _child(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (allocator.ENV, "MALLOC_MMAP_THRESHOLD_")}
    if mode == "fixed":
        env[allocator.ENV] = str(allocator.SAVING_THRESHOLD)
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc are Linux's")
def test_freed_large_blocks_leave_the_process_only_with_the_fixed_threshold():
    fixed, dynamic = _child("fixed"), _child("dynamic")
    assert fixed["set"] == allocator.SAVING_THRESHOLD and dynamic["set"] is None  # off unless asked for
    assert fixed["grown"] > 250 and dynamic["grown"] > 250  # 320 MB touched either way
    assert fixed["kept"] < 0.1 * fixed["grown"]  # unmapped when freed
    assert dynamic["kept"] > 0.5 * dynamic["grown"]  # glibc's default keeps them: why the setting exists


def test_the_threshold_setting_reads_its_variables(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv(allocator.ENV, raising=False)
    assert allocator.threshold_setting() is None  # off by default: glibc's dynamic rule
    monkeypatch.setenv(allocator.ENV, "1048576")
    assert allocator.threshold_setting() == 1 << 20
    monkeypatch.setenv(allocator.ENV, "0")
    assert allocator.threshold_setting() is None  # glibc's dynamic rule
    monkeypatch.setenv(allocator.ENV, "1MB")
    with pytest.raises(UserError, match="TTRL_MMAP_THRESHOLD must be a number of bytes"):
        allocator.threshold_setting()
    monkeypatch.setenv(allocator.ENV, "")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")  # glibc's own variable wins
    assert allocator.threshold_setting() is None


@pytest.mark.parametrize("raw, needle", [
    ("4294967296", "must be at most 33554432 bytes"),       # 2^32: wrapped to 0 in mallopt's C int
    ("18446744073709551617", "must be at most 33554432 bytes"),
    (str(32 * 1024 * 1024 + 1), "must be at most 33554432 bytes"),
    ("9" * 5000, r"must be at most .*got '999999999999'\.\.\. \(5,000 characters\)"),
    ("²", "must be a number of bytes"),                       # str.isdigit, not int()
    ("٣", "must be a number of bytes"),                       # a digit, not an ASCII one
    ("+4096", "must be a number of bytes"), ("-1", "must be a number of bytes"), ("1_024", "must be a number"),
    ("4e6", "must be a number of bytes"),
])
def test_a_threshold_that_would_not_be_the_one_asked_for_is_one_line(monkeypatch, raw, needle):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setenv(allocator.ENV, raw)
    with pytest.raises(UserError, match=f"TTRL_MMAP_THRESHOLD {needle}") as err:
        allocator.threshold_setting()
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_the_largest_threshold_and_leading_zeros_are_taken(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert allocator.MAX_THRESHOLD == 32 << 20  # 64-bit
    for raw, want in ((str(32 << 20), 32 << 20), ("0004096", 4096), ("000", None), (" 65536 ", 65536),
                      ("0" * 5000 + "1", 1)):
        monkeypatch.setenv(allocator.ENV, raw)
        assert allocator.threshold_setting() == want


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux's")
def test_the_threshold_set_is_the_one_asked_for():
    """``mallopt`` is given the threshold asked for (a child process: the setting is process-wide); glibc's
    largest is taken, and ttrl fit refuses 2^32 in one line before anything runs."""
    code = ("from ttrl_lightning.cli.allocator import return_large_blocks; print(return_large_blocks())")
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**env, allocator.ENV: str(32 << 20)})
    assert out.stdout.strip() == str(32 << 20), out.stderr[-2000:]
    fit = subprocess.run([sys.executable, "-m", "ttrl_lightning.cli", "fit", "--print_config"], capture_output=True,
                         text=True, timeout=300, env={**env, allocator.ENV: "4294967296"})
    assert fit.returncode == 1 and fit.stderr.strip().count("\n") == 0, fit.stderr[-2000:]
    assert fit.stderr.startswith("ttrl fit: TTRL_MMAP_THRESHOLD must be at most 33554432 bytes")

"""Backend selection: TTRL_KERNEL_IMPL overrides auto, a missing requested backend raises."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.ops._ops_cases import CPU_BACKENDS, require_backend
from ttrl_lightning.ops import available_backends, selected_backend
from ttrl_lightning.ops import backends

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _import_with(env_value):
    env = {**os.environ, "TTRL_KERNEL_IMPL": env_value, "PYTHONPATH": ROOT}
    env.pop("TRITON_INTERPRET", None)
    code = "import ttrl_lightning.ops as o; print(o.selected_backend('token_stats', 'cpu'))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_torch_always_available_and_auto_resolves():
    assert "torch" in available_backends()
    assert selected_backend("token_stats", "cpu") in ("cpp", "torch")
    assert selected_backend("attention_with_mass", "cpu") in ("cpp", "torch")


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_env_override_picks_backend(name):
    require_backend(name)
    proc = _import_with(name)  # a fresh interpreter: the extension must load without torch imported first
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == name


def test_missing_requested_backend_raises():
    proc = _import_with("cuda")  # no CUDA device / extension on a CPU machine
    if proc.returncode == 0:
        pytest.skip("a CUDA backend is available on this machine")
    assert "TTRL_KERNEL_IMPL=cuda requested but that backend is unavailable" in proc.stderr


def test_unknown_backend_name_raises():
    with pytest.raises(ValueError, match="unknown kernel backend"):
        backends.unavailable_reason("nope")


def test_backend_on_wrong_device_raises():
    import torch

    from ttrl_lightning.ops import token_stats

    require_backend("cpp")
    h = torch.zeros(2, 3)
    with pytest.raises(RuntimeError, match="unavailable|does not run"):
        token_stats(h, torch.zeros(5, 3), torch.zeros(2, dtype=torch.long), backend="cuda")

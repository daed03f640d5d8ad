"""Backend selection, in-process: TTRL_KERNEL_IMPL (read at first use) overrides auto, a missing or unknown
requested backend raises, auto picks the documented backend on CPU, and each backend matches the reference."""
from __future__ import annotations

import pytest
import torch

from tests.ops._backend_check import backend_environment, backend_mismatches
from tests.ops._ops_cases import CPU_BACKENDS, require_backend
from ttrl_lightning.ops import available_backends, backends, selected_backend, token_stats

IMPL_MODULES = {"torch": "ttrl_lightning.ops.torch_impl", "cpp": "ttrl_lightning.ops.cpp_impl",
                "triton": "ttrl_lightning.ops.triton_impl", "cuda": "ttrl_lightning.ops.cuda_impl"}


@pytest.fixture
def fresh_backends(monkeypatch):
    """A clean backend cache with ``TTRL_KERNEL_IMPL`` / ``TRITON_INTERPRET`` unset; cleaned again after."""
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backends.reset_backend_cache()
    yield monkeypatch
    backends.reset_backend_cache()


def test_torch_always_available():
    assert "torch" in available_backends()


def test_auto_on_cpu_is_the_documented_choice(fresh_backends):
    """docs/kernels.md: token_stats and linear_logprobs use the fused C++ epilogues when built (else torch),
    attention torch."""
    assert backends.requested_backend() == "auto"
    want_token_stats = "cpp" if "cpp" in available_backends() else "torch"
    assert selected_backend("token_stats", "cpu") == want_token_stats
    assert selected_backend("attention_with_mass", "cpu") == "torch"
    assert backends.pick("token_stats", "cpu").__module__ == IMPL_MODULES[want_token_stats]
    assert backends.pick("attention_with_mass", "cpu").__module__ == IMPL_MODULES["torch"]
    # linear_logprobs (registered by its module): the C++ tile epilogues when the extension has them
    want_linear = "cpp" if backends.unavailable_reason("cpp", "linear_logprobs") is None else "torch"
    assert selected_backend("linear_logprobs", "cpu") == want_linear
    tile_fn = {"cpp": "_forward_tile_cpp", "torch": "forward_tile_torch"}[want_linear]
    assert backends.pick("linear_logprobs", "cpu").forward_tile.__name__ == tile_fn


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_env_override_dispatches_to_that_backend(fresh_backends, name):
    require_backend(name)
    fresh_backends.setenv(backends.ENV_VAR, name)
    backends.reset_backend_cache()
    assert backends.requested_backend() == name
    for op in backends.OPS:
        assert selected_backend(op, "cpu") == name
        fn = backends.pick(op, "cpu")
        assert fn.__module__ == IMPL_MODULES[name] and fn.__name__ == f"{op}_{name}"


@pytest.mark.parametrize("op", ["token_stats", "linear_logprobs"])
def test_environment_is_read_at_first_use_until_reset(fresh_backends, op):
    """One cached choice per op, linear_logprobs' included: reset_backend_cache forgets it."""
    require_backend("cpp")
    fresh_backends.setenv(backends.ENV_VAR, "torch")
    assert selected_backend(op, "cpu") == "torch"
    fresh_backends.setenv(backends.ENV_VAR, "cpp")
    assert selected_backend(op, "cpu") == "torch"  # cached since the first use
    backends.reset_backend_cache()
    assert selected_backend(op, "cpu") == "cpp"


def test_env_override_calls_that_backend(fresh_backends):
    """The op really runs the selected implementation (a spy in its place is called)."""
    require_backend("cpp")
    fresh_backends.setenv(backends.ENV_VAR, "cpp")
    backends.reset_backend_cache()
    fns = backends.BACKENDS["cpp"].load()
    calls = []
    real = fns["token_stats"]
    fresh_backends.setitem(fns, "token_stats", lambda *a: calls.append(a) or real(*a))
    token_stats(torch.zeros(2, 3), torch.zeros(5, 3), torch.zeros(2, dtype=torch.long))
    assert len(calls) == 1


def test_missing_requested_backend_raises_at_first_use(fresh_backends):
    if backends.unavailable_reason("cuda") is None:
        pytest.skip("a CUDA backend is available on this machine")
    fresh_backends.setenv(backends.ENV_VAR, "cuda")
    backends.reset_backend_cache()
    with pytest.raises(RuntimeError, match="TTRL_KERNEL_IMPL=cuda requested but that backend is unavailable"):
        token_stats(torch.zeros(2, 3), torch.zeros(5, 3), torch.zeros(2, dtype=torch.long))


def test_unknown_backend_name_raises_naming_the_known_ones(fresh_backends):
    fresh_backends.setenv(backends.ENV_VAR, "nope")
    backends.reset_backend_cache()
    known = r"unknown kernel backend 'nope'; known: \['cpp', 'cuda', 'torch', 'triton'\]"
    with pytest.raises(ValueError, match=known):
        selected_backend("token_stats", "cpu")
    with pytest.raises(ValueError, match="unknown kernel backend"):
        backends.unavailable_reason("nope")


def test_backend_on_wrong_device_raises():
    require_backend("cpp")
    h = torch.zeros(2, 3)
    with pytest.raises(RuntimeError, match="unavailable|does not run"):
        token_stats(h, torch.zeros(5, 3), torch.zeros(2, dtype=torch.long), backend="cuda")


def test_forced_backend_on_a_device_it_does_not_run_on_raises(fresh_backends):
    require_backend("cpp")
    fresh_backends.setenv(backends.ENV_VAR, "cpp")
    backends.reset_backend_cache()
    with pytest.raises(RuntimeError, match="TTRL_KERNEL_IMPL=cpp does not run on cuda tensors"):
        backends.pick("token_stats", "cuda")


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_backend_matches_reference_through_the_environment(name):
    require_backend(name)
    assert backend_mismatches(name, "cpu") == []


def test_backend_environment_restores_the_environment(fresh_backends):
    fresh_backends.setenv(backends.ENV_VAR, "torch")
    with backend_environment("cpp"):
        assert backends.requested_backend() == "cpp"
    assert backends.requested_backend() == "torch"

"""Every Triton kernel of ``ttrl_lightning.ops``, compiled by the real compiler (not the interpreter) for sm_80,
sm_89 and sm_90 without a GPU: each configuration its launcher chooses must compile and fit that
architecture's opt-in shared memory per block, and the launchers' shared-memory bounds must hold.

The default run compiles one configuration per kernel and architecture: fp32 attention at head dim 128 (the
configuration whose 185,600 B overflowed sm_80 and sm_89 before the launcher fitted its blocks), fp32
token_stats with bias and the widest linear_logprobs tiles; Triton caches compiled kernels on disk, so a
second run takes seconds. The exhaustive sweep (every dtype, head dim, bias,
causal flag and group count) is marked slow; ``python -m benchmarks.kernels.triton_compile_check`` prints it as a
table.
"""
from __future__ import annotations

import inspect

import pytest

pytest.importorskip("triton", reason="triton is not installed")

from ttrl_lightning.ops import triton_impl  # noqa: E402
from ttrl_lightning.ops.triton_compile import (  # noqa: E402
    ARCHITECTURES,
    DTYPES,
    HEAD_DIMS,
    KERNELS,
    compile_config,
    launch_configs,
)

ARCHS = list(ARCHITECTURES.values())


def _check_compiles_within_limits(arch, configs):
    assert configs, f"no configuration listed for {arch.name}"
    for config in configs:
        compiled = compile_config(config, arch)
        shared = compiled.metadata.shared
        where = f"{config.name} [{config.label}] on {arch.name} ({arch.devices})"
        assert shared <= arch.shared_limit, f"{where} needs {shared} B of shared memory > {arch.shared_limit}"
        if config.bound is not None:
            assert shared <= config.bound, f"{where} needs {shared} B, above the launcher's bound {config.bound}"


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("arch", ARCHS, ids=[a.name for a in ARCHS])
def test_default_launch_config_compiles_within_shared_memory(arch, kernel):
    _check_compiles_within_limits(arch, launch_configs(arch, exhaustive=False, kernels=[kernel]))


@pytest.mark.slow
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("arch", ARCHS, ids=[a.name for a in ARCHS])
def test_every_launch_config_compiles_within_shared_memory(arch, kernel):
    _check_compiles_within_limits(arch, launch_configs(arch, exhaustive=True, kernels=[kernel]))


def _kernel_constexprs(kernel):
    return {n for n, p in inspect.signature(kernel.fn).parameters.items() if "constexpr" in str(p.annotation)}


@pytest.mark.parametrize("arch", ARCHS, ids=[a.name for a in ARCHS])
def test_attention_blocks_fit_each_architecture(arch):
    for dtype in DTYPES:
        for head_dim in HEAD_DIMS:
            blocks = triton_impl.attention_blocks(dtype, head_dim, arch.shared_limit)
            constexprs = {k for k in blocks if k not in ("num_warps", "num_stages")}
            assert constexprs == _kernel_constexprs(triton_impl._attn_mass_kernel)
            assert blocks["GP"] == 16 and blocks["CAUSAL"] is True and blocks["LOWP"] == (dtype != "fp32")
            assert blocks["BLOCK_D"] >= head_dim
            bound = triton_impl.attention_shared_bytes(dtype, blocks["BLOCK_M"], blocks["BLOCK_N"],
                                                       blocks["BLOCK_D"], blocks["GP"], blocks["num_stages"])
            assert bound <= arch.shared_limit, (dtype, head_dim, blocks, bound)


def test_attention_blocks_per_architecture():
    """fp32 at head dim 128 needed 185,600 B with 64 x 64 blocks and 3 stages: kept on sm_90 only."""
    def tile(dtype, head_dim, arch):
        b = triton_impl.attention_blocks(dtype, head_dim, ARCHITECTURES[arch].shared_limit)
        return b["BLOCK_M"], b["BLOCK_N"], b["BLOCK_D"], b["num_stages"]

    assert tile("fp32", 128, "sm_90") == (64, 64, 128, 3)
    assert tile("fp32", 128, "sm_80") == (64, 64, 128, 2)
    assert tile("fp32", 128, "sm_89") == (64, 32, 128, 2)
    assert tile("fp32", 64, "sm_80") == (128, 64, 64, 3)
    assert tile("fp32", 64, "sm_89") == (64, 64, 64, 2)
    for arch in ARCHITECTURES:
        assert tile("bf16", 64, arch) == (128, 64, 64, 3)
        assert tile("bf16", 96, arch) == (64, 64, 128, 3)
        assert tile("fp16", 256, arch) == (64, 64, 256, 3)


def test_token_stats_blocks_fit_each_architecture():
    for arch in ARCHS:
        for dtype in DTYPES:
            blocks = triton_impl.token_stats_blocks(dtype, arch.shared_limit, has_bias=True)
            constexprs = {k for k in blocks if k not in ("num_warps", "num_stages")}
            assert constexprs == _kernel_constexprs(triton_impl._token_stats_kernel)
            assert blocks["HAS_BIAS"] is True and blocks["LOWP"] == (dtype != "fp32")
            assert (blocks["BLOCK_M"], blocks["BLOCK_V"], blocks["BLOCK_H"], blocks["num_stages"]) == (64, 128, 64, 3)
    small = triton_impl.token_stats_blocks("fp32", 60_000)
    assert small["num_stages"] == 2 and triton_impl.token_stats_shared_bytes(
        "fp32", small["BLOCK_M"], small["BLOCK_V"], small["BLOCK_H"], small["num_stages"]) <= 60_000


def test_block_choosers_reject_what_cannot_fit_and_unknown_dtypes():
    with pytest.raises(ValueError, match="head dim 256.*1000 bytes"):
        triton_impl.attention_blocks("fp32", 256, 1000)
    with pytest.raises(ValueError, match="token_stats.*1000 bytes"):
        triton_impl.token_stats_blocks("bf16", 1000)
    with pytest.raises(ValueError, match="dtype must be one of"):
        triton_impl.attention_blocks("float32", 128, 232_448)


def test_device_shared_limit_reads_the_opt_in_limit(monkeypatch):
    import torch

    class Props:
        shared_memory_per_block_optin = 101_376

    triton_impl._shared_limit_of.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props())
    try:
        assert triton_impl.device_shared_limit(torch.device("cuda", 0)) == 101_376
        blocks = triton_impl.attention_blocks("fp32", 128, triton_impl.device_shared_limit(torch.device("cuda", 0)))
        assert (blocks["BLOCK_M"], blocks["BLOCK_N"]) == (64, 32)
    finally:
        triton_impl._shared_limit_of.cache_clear()
    assert triton_impl.device_shared_limit(torch.device("cpu")) == triton_impl.SMALLEST_SHARED_LIMIT

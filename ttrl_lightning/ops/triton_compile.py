"""Ahead-of-time compilation of the package's Triton kernels for GPU architectures, on a machine without a GPU.

Triton's compiler needs no device: ``triton.compile(ASTSource(fn=kernel, signature=..., constexprs=...),
target=GPUTarget("cuda", cc, 32))`` lowers a kernel to a cubin for compute capability ``cc`` and reports the
shared memory one block needs (``metadata.shared``). A launch whose block needs more than the device's
opt-in limit per block fails with "out of resources", which the CPU interpreter never shows, so every
configuration a launcher can choose is compiled here for each supported architecture and checked against
that architecture's limit (tests/ops/test_triton_compile.py, benchmarks/kernels/triton_compile_check.py).

* :data:`ARCHITECTURES`: compute capability, opt-in shared memory per block (NVIDIA's tuning guides: 163 KB
  on the A100, 99 KB on compute capability 8.6/8.9, 227 KB on the H100/H200; 1 KB = 1,024 B).
* :data:`KERNELS`: a registry, kernel name -> function listing the :class:`LaunchConfig` s its launcher can
  choose for one architecture (``exhaustive=False``: one representative configuration, for the fast
  default test: fp32 attention at head dim 128, fp32 token_stats with bias, the widest linear_logprobs
  tiles).
* :func:`compile_config`: compiles one configuration, returning the compiled kernel (Triton caches it on disk,
  ``~/.triton/cache`` or ``TRITON_CACHE_DIR``, so a second run costs milliseconds).
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Callable

import triton

from . import triton_impl

#: the dtypes every launcher is checked with
DTYPES = ("fp32", "bf16", "fp16")
#: head dims of the models the attention kernel serves (80 and 96 round up to a 128-wide block)
HEAD_DIMS = (64, 80, 96, 128, 256)
#: key-group counts of the attention kernel's supported range (one compile: the group count is a runtime
#: argument and GP, the padded count, is 16 for all of them)
GROUP_COUNTS = tuple(range(2, 17))
_POINTER = {"fp32": "*fp32", "bf16": "*bf16", "fp16": "*fp16"}


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    capability: int
    shared_limit: int
    devices: str


ARCHITECTURES = {
    "sm_80": Architecture("sm_80", 80, 166_912, "A100"),
    "sm_89": Architecture("sm_89", 89, 101_376, "L4, L40S, RTX 4090"),
    "sm_90": Architecture("sm_90", 90, 232_448, "H100, H200"),
}


@dataclasses.dataclass
class LaunchConfig:
    """One compile request: ``kernel`` (a ``triton.jit`` function), its runtime ``signature`` (argument name
    -> Triton type), ``constexprs``, launch ``options`` (``num_warps``, ``num_stages``), a ``label`` for
    reports and the launcher's shared-memory ``bound`` (bytes) when it has one."""
    name: str
    kernel: Callable
    signature: dict
    constexprs: dict
    options: dict
    label: str
    bound: int | None = None


def _split_launch_options(blocks: dict) -> tuple[dict, dict]:
    options = {k: blocks[k] for k in ("num_warps", "num_stages") if k in blocks}
    return {k: v for k, v in blocks.items() if k not in options}, options


def _padded_group_counts() -> dict[int, list[int]]:
    """GP (the group count padded to a power of two >= 16, the only group constexpr) -> the counts it serves."""
    out: dict[int, list[int]] = {}
    for g in GROUP_COUNTS:
        out.setdefault(max(16, triton.next_power_of_2(g)), []).append(g)
    return out


def attention_configs(arch: Architecture, exhaustive: bool = True) -> list[LaunchConfig]:
    """``_attn_mass_kernel`` for every dtype, head dim, causal flag and group count (2-16), blocks as
    :func:`triton_impl.attention_blocks` chooses them for ``arch``; default test: fp32 at head dim 128."""
    configs = []
    for dtype in DTYPES:
        ptr = _POINTER[dtype]
        signature = dict(q_ptr=ptr, k_ptr=ptr, v_ptr=ptr, g_ptr="*i32", o_ptr=ptr, mass_ptr="*fp32",
                         **{n: "i32" for n in ("Hq", "Tq", "Tk", "D", "rep", "off", "num_groups")}, scale="fp32",
                         **{n: "i32" for n in ("sq_b", "sq_h", "sq_t", "sk_b", "sk_h", "sk_t", "so_b", "so_h",
                                               "so_t", "sg_b")})
        for head_dim in HEAD_DIMS:
            for causal in (True, False):
                for gp, groups in _padded_group_counts().items():
                    blocks = triton_impl.attention_blocks(dtype, head_dim, arch.shared_limit, groups[0], causal)
                    constexprs, options = _split_launch_options(blocks)
                    bound = triton_impl.attention_shared_bytes(dtype, blocks["BLOCK_M"], blocks["BLOCK_N"],
                                                               blocks["BLOCK_D"], gp, blocks["num_stages"])
                    configs.append(LaunchConfig(
                        "attention_with_mass", triton_impl._attn_mass_kernel, signature, constexprs, options,
                        f"{dtype} d={head_dim} causal={causal} groups={groups[0]}-{groups[-1]} "
                        f"blocks={blocks['BLOCK_M']}x{blocks['BLOCK_N']}x{blocks['BLOCK_D']} "
                        f"stages={blocks['num_stages']}", bound))
    if not exhaustive:
        return [c for c in configs if c.label.startswith("fp32 d=128 causal=True ")]
    return configs


def token_stats_configs(arch: Architecture, exhaustive: bool = True) -> list[LaunchConfig]:
    """``_token_stats_kernel`` for every dtype with and without bias (inputs of one dtype; mixed dtypes run the
    fp32 path), blocks as :func:`triton_impl.token_stats_blocks` chooses them; default test: fp32 with bias."""
    configs = []
    for dtype in DTYPES:
        ptr = _POINTER[dtype]
        signature = dict(h_ptr=ptr, w_ptr=ptr, b_ptr=ptr, ids_ptr="*i64", part_ptr="*fp32",
                         M="i32", V="i32", H="i32", inv_t="fp32", split_v="i32", stride_hm="i32", stride_wv="i32")
        for bias in (True, False):
            blocks = triton_impl.token_stats_blocks(dtype, arch.shared_limit, has_bias=bias)
            constexprs, options = _split_launch_options(blocks)
            bound = triton_impl.token_stats_shared_bytes(dtype, blocks["BLOCK_M"], blocks["BLOCK_V"],
                                                         blocks["BLOCK_H"], blocks["num_stages"])
            configs.append(LaunchConfig(
                "token_stats", triton_impl._token_stats_kernel, signature, constexprs, options,
                f"{dtype} bias={bias} blocks={blocks['BLOCK_M']}x{blocks['BLOCK_V']}x{blocks['BLOCK_H']} "
                f"stages={blocks['num_stages']}", bound))
    return configs if exhaustive else [c for c in configs if c.label.startswith("fp32 bias=True")]


def _tile_widths(arch: Architecture) -> list[int]:
    """The ``BLOCK_C`` values ``linear_logprobs_triton.tile_blocks`` can return for tiles of 1 to 8,192 columns."""
    from . import linear_logprobs_triton as ll

    return sorted({ll.tile_blocks(1 << p, arch.shared_limit, interpret=False)["BLOCK_C"] for p in range(14)})


def linear_logprobs_forward_configs(arch: Architecture, exhaustive: bool = True) -> list[LaunchConfig]:
    """``linear_logprobs`` forward tile epilogue (float32 logits tile) for every ``BLOCK_C`` its chooser can
    return and every (``WRITE_E``, ``WRITE_EZ``) pair; default test: the widest tile with both writes."""
    from . import linear_logprobs_triton as ll

    signature = dict(**{n: "*fp32" for n in ("z_ptr", "ez_ptr", "m_ptr", "s_ptr", "t_ptr", "zy_ptr")},
                     ids_ptr="*i64", alpha_ptr="*fp32", C="i32", v0="i32", stride_z="i32")
    widths = _tile_widths(arch) if exhaustive else _tile_widths(arch)[-1:]
    flags = [(e, ez) for e in (True, False) for ez in (True, False)] if exhaustive else [(True, True)]
    configs = []
    for width in widths:
        blocks = ll.tile_blocks(width, arch.shared_limit, interpret=False)
        constexprs, options = _split_launch_options(blocks)
        for write_e, write_ez in flags:
            configs.append(LaunchConfig(
                "linear_logprobs_forward_tile", ll._forward_tile_kernel, signature,
                dict(WRITE_E=write_e, WRITE_EZ=write_ez, **constexprs), options,
                f"BLOCK_C={blocks['BLOCK_C']} write_e={write_e} write_ez={write_ez}"))
    return configs


def linear_logprobs_backward_configs(arch: Architecture, exhaustive: bool = True) -> list[LaunchConfig]:
    """``linear_logprobs`` backward tile epilogue for every ``BLOCK_C`` and with/without the entropy term;
    default test: the widest tile with the entropy term."""
    from . import linear_logprobs_triton as ll

    signature = dict(**{n: "*fp32" for n in ("z_ptr", "lse_ptr", "mu_ptr", "g_ptr", "gh_ptr")},
                     ids_ptr="*i64", C="i32", v0="i32", stride_z="i32")
    widths = _tile_widths(arch) if exhaustive else _tile_widths(arch)[-1:]
    configs = []
    for width in widths:
        blocks = ll.tile_blocks(width, arch.shared_limit, interpret=False)
        constexprs, options = _split_launch_options(blocks)
        for entropy in ((True, False) if exhaustive else (True,)):
            configs.append(LaunchConfig(
                "linear_logprobs_backward_tile", ll._backward_tile_kernel, signature,
                dict(WITH_ENTROPY=entropy, **constexprs), options,
                f"BLOCK_C={blocks['BLOCK_C']} entropy={entropy}"))
    return configs


#: kernel name -> configurations its launcher can choose for one architecture
KERNELS: dict[str, Callable[..., list[LaunchConfig]]] = {
    "attention_with_mass": attention_configs,
    "token_stats": token_stats_configs,
    "linear_logprobs_forward_tile": linear_logprobs_forward_configs,
    "linear_logprobs_backward_tile": linear_logprobs_backward_configs,
}


def launch_configs(arch: Architecture, exhaustive: bool = True, kernels=None) -> list[LaunchConfig]:
    """Every configuration of ``kernels`` (default: all of :data:`KERNELS`) for ``arch``; one per kernel when
    not ``exhaustive``."""
    return [config for name in (kernels or KERNELS) for config in KERNELS[name](arch, exhaustive)]


def _pointer_alignment(config: LaunchConfig) -> dict:
    """Divisibility hints a launch with torch tensors passes for pointers (allocations are 256-byte aligned)."""
    names = list(config.kernel.arg_names)
    return {(names.index(n),): [["tt.divisibility", 16]] for n, t in config.signature.items() if t.startswith("*")}


def compile_config(config: LaunchConfig, arch: Architecture):
    """Compile ``config`` for ``arch`` (no GPU needed); returns Triton's compiled kernel, whose
    ``metadata.shared`` is the block's shared memory in bytes."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if "constexprs" in inspect.signature(ASTSource).parameters:  # Triton >= 3.3
        signature = {**config.signature, **{k: "constexpr" for k in config.constexprs}}
        src = ASTSource(fn=config.kernel, signature=signature, constexprs=dict(config.constexprs),
                        attrs=_pointer_alignment(config))
    else:  # Triton 3.2: constexprs by name as "constants", the signature lists the runtime arguments only
        src = ASTSource(fn=config.kernel, signature=dict(config.signature), constants=dict(config.constexprs))
    return triton.compile(src, target=GPUTarget("cuda", arch.capability, 32), options=dict(config.options))

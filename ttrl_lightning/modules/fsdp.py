"""FSDP2 sharding of the policy and of its frozen copies (the KL reference, the EMA anchor).

Under Lightning's ``ModelParallelStrategy`` (FSDP2, ``torch.distributed.fsdp.fully_shard``) the module's
``configure_model`` calls ``shard_policy``: every transformer block (the classes the model lists in
``_no_split_modules``) becomes its own FSDP unit, then the whole model; each parameter becomes a DTensor
``Shard(0)`` over the data-parallel mesh, so rank r holds rows r*ceil(n/W) ... of every tensor.

A frozen copy must run its forward the same way (its own all-gathers, over the same mesh), so it is sharded
with the same plan: ``frozen_copy`` deep-copies a parameter-free skeleton of the policy taken before
sharding (FSDP2 refuses to deep-copy a sharded module), shards it like the policy and copies each rank's
local shards into it. Elementwise rules (the EMA update) then work shard by shard on ``local_tensor``.

Checkpoints: ``checkpoint_entry`` / ``restore_checkpoint_entry`` save a sharded copy with the policy's
sharded state (a distributed checkpoint folder: the local DTensors join ``checkpoint["state_dict"]`` under
a key prefix and each rank writes its shard) or, when the strategy writes one full file, as full tensors
gathered on every rank (rank 0 writes them).
"""
from __future__ import annotations

import copy
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import nn

#: sharded policy -> (parameter-free skeleton of it before sharding, data-parallel mesh)
_SHARDED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

#: key prefix, in a distributed checkpoint's ``state_dict``, of the shards of every frozen copy
COPIES_PREFIX = "frozen_copies."


def _dtensor_cls():
    from torch.distributed.tensor import DTensor

    return DTensor


def is_sharded(module: nn.Module) -> bool:
    """True when any parameter of ``module`` is a DTensor (FSDP2)."""
    DTensor = _dtensor_cls()
    return any(isinstance(p, DTensor) for p in module.parameters())


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (a view: in-place changes reach the DTensor), or ``t`` itself."""
    return t.to_local() if isinstance(t, _dtensor_cls()) else t


def _block_classes(model: nn.Module) -> set[str]:
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or ())
    return names


def _apply_plan(model: nn.Module, mesh, reshard_root: bool | None) -> None:
    from torch.distributed.fsdp import fully_shard

    blocks = _block_classes(model)
    for m in list(model.modules()):
        if m is not model and type(m).__name__ in blocks:
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_root)
    # transformers' generate() runs lock-step decoding (synced_gpus) only for modules it knows as sharded;
    # without it a rank that finished early would stop joining the other ranks' all-gathers
    for m in model.modules():
        if hasattr(m, "generate"):
            m._is_fsdp_managed_module = True


def shard_policy(model: nn.Module, device_mesh) -> nn.Module:
    """Shard ``model`` in place with FSDP2 over the data-parallel dimension of Lightning's ``device_mesh``
    (``ModelParallelStrategy``; tensor parallelism is not supported: its size must be 1)."""
    names = device_mesh.mesh_dim_names or ()
    mesh = device_mesh
    if "tensor_parallel" in names:
        if device_mesh["tensor_parallel"].size() != 1:
            raise ValueError("the policy is sharded with FSDP only: set the strategy's tensor_parallel_size: "
                             "1 and data_parallel_size to the number of processes")
        mesh = device_mesh["data_parallel"]
    memo = {id(p): nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
            for p in model.parameters()}
    skeleton = copy.deepcopy(model, memo)
    _apply_plan(model, mesh, reshard_root=None)
    _SHARDED[model] = (skeleton, mesh)
    return model


def frozen_copy(module: nn.Module) -> nn.Module:
    """A frozen copy (eval mode, no gradients) with the same weights; sharded like ``module`` when it is
    sharded (then every rank must call this, in the same order)."""
    if not is_sharded(module):
        return copy.deepcopy(module).eval().requires_grad_(False)
    if module not in _SHARDED:
        raise RuntimeError("this model was not sharded by shard_policy: no sharded copy of it can be built")
    skeleton, mesh = _SHARDED[module]
    twin = copy.deepcopy(skeleton)
    _apply_plan(twin, mesh, reshard_root=True)  # a frozen copy never runs backward: reshard after forward
    device = next(local_tensor(p) for p in module.parameters()).device
    twin.to_empty(device=device)
    with torch.no_grad():
        src = dict(module.named_parameters())
        for name, p in twin.named_parameters():
            local_tensor(p).copy_(local_tensor(src[name]))
        src = dict(module.named_buffers())
        for name, b in twin.named_buffers():
            b.copy_(src[name])
    _SHARDED[twin] = (skeleton, mesh)
    return twin.eval().requires_grad_(False)


@torch.no_grad()
def full_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every state tensor in full, on the CPU, on every rank (all-gathers the DTensors: a collective)."""
    DTensor = _dtensor_cls()
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu().clone()
            for k, v in module.state_dict().items()}


@torch.no_grad()
def load_full_state_dict_(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy full tensors into ``module``; each rank keeps its own shard of a DTensor (no communication)."""
    from torch.distributed.tensor import distribute_tensor

    DTensor = _dtensor_cls()
    own = module.state_dict()
    if set(own) != set(state):
        missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        raise KeyError(f"state does not match the module: missing {missing[:5]}, unexpected {extra[:5]}")
    for k, v in own.items():
        full = state[k]
        if isinstance(v, DTensor):
            full = distribute_tensor(full.to(v.device, v.dtype), v.device_mesh, v.placements,
                                     src_data_rank=None)
        local_tensor(v).copy_(local_tensor(full))


def _is_distributed_checkpoint(checkpoint: dict) -> bool:
    DTensor = _dtensor_cls()
    return any(isinstance(v, DTensor) for v in checkpoint.get("state_dict", {}).values())


def checkpoint_entry(module: nn.Module, checkpoint: dict, key: str) -> dict[str, Any]:
    """What to keep in the checkpoint for the sharded ``module`` (call it on every rank).

    Distributed checkpoint (the policy's own state is DTensors): the local shards join
    ``checkpoint["state_dict"]`` under ``"frozen_copies.<key>."`` and are written with the policy's
    shards; the entry names the prefix. Full checkpoint: the entry holds the full tensors (gathered; rank 0
    writes them).
    """
    if _is_distributed_checkpoint(checkpoint):
        prefix = f"{COPIES_PREFIX}{key}."
        for k, v in module.state_dict().items():
            checkpoint["state_dict"][prefix + k] = v.detach()
        return {"sharded_prefix": prefix}
    return {"full_state": full_state_dict(module)}


def restore_checkpoint_entry(module: nn.Module, entry: dict[str, Any],
                             checkpoint_path: str | Path | None) -> None:
    """Inverse of ``checkpoint_entry``: full tensors are split locally; a prefix is read from the distributed
    checkpoint folder ``checkpoint_path`` into this rank's shards (a collective)."""
    if "full_state" in entry:
        load_full_state_dict_(module, entry["full_state"])
        return
    from torch.distributed.checkpoint import load

    if checkpoint_path is None:
        raise RuntimeError("a sharded state is read from its distributed checkpoint folder: no path is known")
    prefix = entry["sharded_prefix"]
    target = {prefix + k: v for k, v in module.state_dict().items()}
    load({"state_dict": target}, checkpoint_id=str(checkpoint_path))
    with torch.no_grad():  # DCP loads in place where it can; copy whatever it replaced
        for k, v in module.state_dict().items():
            if target[prefix + k] is not v:
                local_tensor(v).copy_(local_tensor(target[prefix + k]))


def pop_copy_entries(state_dict: dict, prefix: str = COPIES_PREFIX) -> dict[str, torch.Tensor]:
    """Remove and return the keys under ``prefix`` (by default the shards of every frozen copy) from a model
    state dict, the prefix stripped; a consolidated distributed checkpoint carries them in full."""
    keys = [k for k in state_dict if k.startswith(prefix)]
    return {k[len(prefix):]: state_dict.pop(k) for k in keys}

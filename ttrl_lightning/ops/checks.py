"""Input validation shared by every backend of the signal ops: one clear error per problem."""
from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32/float16/bfloat16, got {t.dtype}")


def check_token_stats_inputs(hidden, weight, token_ids, bias, temperature) -> None:
    if hidden.dim() != 2:
        raise ValueError(f"hidden must be [M, H], got shape {tuple(hidden.shape)}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be [V, H], got shape {tuple(weight.shape)}")
    M, H = hidden.shape
    V = weight.shape[0]
    if weight.shape[1] != H:
        raise ValueError(f"hidden is [M, {H}] but weight is {tuple(weight.shape)}: hidden sizes differ")
    if V == 0 or H == 0:
        raise ValueError(f"empty vocabulary or hidden size: weight shape {tuple(weight.shape)}")
    if token_ids.shape != (M,):
        raise ValueError(f"token_ids must be [M={M}], got shape {tuple(token_ids.shape)}")
    if token_ids.dtype.is_floating_point:
        raise TypeError(f"token_ids must be an integer tensor, got {token_ids.dtype}")
    _check_float("hidden", hidden)
    _check_float("weight", weight)
    if bias is not None:
        if bias.shape != (V,):
            raise ValueError(f"bias must be [V={V}], got shape {tuple(bias.shape)}")
        _check_float("bias", bias)
    if not (float(temperature) > 0.0) or float(temperature) == float("inf"):
        raise ValueError(f"temperature must be a finite positive number, got {temperature}")
    devices = {hidden.device, weight.device, token_ids.device} | ({bias.device} if bias is not None else set())
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")
    if M and int(token_ids.max()) >= V:
        raise ValueError(f"token_ids contains id {int(token_ids.max())} >= vocabulary size {V}")


def check_token_stats_outputs(lse: torch.Tensor) -> None:
    if lse.numel() and not bool(torch.isfinite(lse).all()):
        bad = int((~torch.isfinite(lse)).nonzero()[0, 0])
        raise ValueError(
            f"token_stats: non-finite log-sum-exp at token {bad}: hidden/weight/bias contain NaN or inf, "
            "or the logits overflow"
        )


def check_attention_inputs(q, k, v, key_groups, num_groups) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be [B, H, T, d], got shape {tuple(t.shape)}")
        _check_float(name, t)
    B, Hq, Tq, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != B or k.shape[3] != d:
        raise ValueError(f"k/v {tuple(k.shape)} do not match q {tuple(q.shape)} in batch or head dim")
    Hkv, Tk = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv})")
    if Tq == 0 or Tk == 0 or d == 0:
        raise ValueError(f"empty attention: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if Tq > Tk:
        raise ValueError(f"more queries ({Tq}) than keys ({Tk}): queries must be the last Tq of the keys")
    if key_groups.shape != (B, Tk):
        raise ValueError(f"key_groups must be [B={B}, Tk={Tk}], got shape {tuple(key_groups.shape)}")
    if key_groups.dtype.is_floating_point:
        raise TypeError(f"key_groups must be an integer tensor, got {key_groups.dtype}")
    if int(num_groups) < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    if int(key_groups.max()) >= num_groups or int(key_groups.min()) < -1:
        raise ValueError(
            f"key_groups values must be in [-1, {num_groups - 1}] (-1 = padding), "
            f"got range [{int(key_groups.min())}, {int(key_groups.max())}]"
        )
    devices = {q.device, k.device, v.device, key_groups.device}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")


def check_attention_outputs(mass: torch.Tensor) -> None:
    if not bool(torch.isfinite(mass).all()):
        raise ValueError("attention_with_mass: non-finite attention mass: q/k/v contain NaN or inf")

"""Reading Lightning checkpoints written by ``ttrl fit`` safely, and the policy they hold.

* :func:`load_checkpoint`: a weights-only ``torch.load`` on the CPU that refuses a missing, empty, truncated
  or foreign file (or one that would need to run code to unpickle) with a message naming it;
* :func:`policy_state_from_checkpoint`: the ``PolicySpec`` fields (``hyper_parameters["policy"]``) and the
  policy's weights (the ``policy.`` entries of ``state_dict``) of a checkpoint of any ``PolicyModule``.
"""
from __future__ import annotations

import os
import pickle
import zipfile
from typing import Any

import torch

from ttrl_lightning.errors import UserError

#: ``ckpt_path`` values the Trainer resolves itself (not file names)
TRAINER_CKPT_KEYWORDS = ("last", "best", "hpc", "registry")


#: torch's boilerplate around the reason a weights-only load failed
_TORCH_LOAD_BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation",
                           "Re-running `torch.load`")


def _load_failure(error: BaseException) -> str:
    """The line of a failed ``torch.load`` that says why (torch wraps it in advice about ``weights_only``)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line for line in lines if not line.startswith(_TORCH_LOAD_BOILERPLATE)), "")
    reason = reason.removeprefix("WeightsUnpickler error:").strip() or type(error).__name__
    return reason if len(reason) <= 120 else reason[:117] + "..."


def load_checkpoint(path: str) -> dict | None:
    """The checkpoint at ``path`` (weights-only load, on the CPU), or None where the Trainer resolves the path
    itself (``last``/``best``/..., a remote URL, a distributed checkpoint folder).

    Raises :class:`~ttrl_lightning.errors.UserError` naming the file when it is missing, empty, not a complete
    ``torch.save`` archive (truncated, or another kind of file) or not a Lightning checkpoint; a file that
    would need to run code to unpickle is refused, never run.
    """
    path = str(path)
    if path in TRAINER_CKPT_KEYWORDS or path.startswith("registry:") or "://" in path or os.path.isdir(path):
        return None
    if not os.path.exists(path):
        raise UserError(f"checkpoint {path} does not exist")
    if not os.path.isfile(path):
        raise UserError(f"checkpoint {path} is not a file")
    if os.path.getsize(path) == 0:
        raise UserError(f"checkpoint {path} is empty (0 bytes)")
    if not zipfile.is_zipfile(path):
        raise UserError(f"checkpoint {path} is not a Lightning checkpoint (not a complete torch.save "
                        "archive: truncated, or another kind of file)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise UserError(f"checkpoint {path} is not a Lightning checkpoint (it holds objects other than "
                        f"tensors and plain data, which are not loaded: {_load_failure(e)})") from e
    except Exception as e:  # noqa: BLE001 - whatever torch.load says, the file is not one we can resume from
        raise UserError(f"checkpoint {path} is not a Lightning checkpoint ({_load_failure(e)})") from e
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        held = (f"keys {sorted(map(str, checkpoint))[:6]}" if isinstance(checkpoint, dict)
                else type(checkpoint).__name__)
        raise UserError(f"checkpoint {path} is not a Lightning checkpoint (no state_dict; it holds {held})")
    check_checkpoint_layout(checkpoint, path)
    return checkpoint


def check_checkpoint_layout(checkpoint: dict, path: str) -> None:
    """Refuse a checkpoint whose entries are not laid out as a Lightning checkpoint's are, before anything reads
    them: ``state_dict`` a mapping of names to tensors (a list, or a value that is not a tensor, was an
    ``AttributeError`` or a ``TypeError`` deep in the load), ``hyper_parameters`` (when present) a mapping. One
    ``UserError`` naming the file and the entry."""
    state = checkpoint["state_dict"]
    if not isinstance(state, dict):
        raise UserError(f"checkpoint {path} is not a Lightning checkpoint (its state_dict is a "
                        f"{type(state).__name__}, not a mapping of names to tensors)")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise UserError(f"checkpoint {path} is not a Lightning checkpoint (its state_dict entry {key!r:.80} "
                            f"is a {type(value).__name__}, not a tensor)")
    hparams = checkpoint.get("hyper_parameters")
    if hparams is not None and not isinstance(hparams, dict):
        raise UserError(f"checkpoint {path} is not a Lightning checkpoint (its hyper_parameters is a "
                        f"{type(hparams).__name__}, not a mapping)")
    key = first_non_finite(state.items())
    if key is not None:  # a run resumed from it, or a model loaded from it, samples from NaN probabilities
        raise UserError(f"checkpoint {path}: its state_dict entry {key} holds non-finite values (NaN or "
                        "infinity): the run that wrote it diverged; use an earlier checkpoint")


#: the most elements of a tensor tested for non-finite values at once (:func:`first_non_finite`): the bool
#: tensor of the test stays this small, whatever the weight's size
FINITE_CHECK_BLOCK = 1 << 24


def first_non_finite(named_tensors) -> str | None:
    """The name of the first floating-point tensor of ``named_tensors`` (``(name, tensor)`` pairs) holding a NaN
    or an infinity, or None; read in blocks of :data:`FINITE_CHECK_BLOCK` elements (a sharded or meta tensor
    is passed over: its values are not here)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - a torch without distributed tensors
        DTensor = ()
    with torch.no_grad():
        for name, tensor in named_tensors:
            if not tensor.is_floating_point() or tensor.device.type == "meta" or isinstance(tensor, DTensor):
                continue
            flat = tensor.detach().reshape(-1)
            for start in range(0, flat.numel(), FINITE_CHECK_BLOCK):
                if not bool(torch.isfinite(flat[start:start + FINITE_CHECK_BLOCK]).all()):
                    return name
    return None


#: prefix of the policy's weights in a PolicyModule's ``state_dict``
POLICY_PREFIX = "policy."


def is_checkpoint_path(name: str) -> bool:
    """Whether a model name is a Lightning checkpoint file (``*.ckpt``) rather than a model directory."""
    return str(name).endswith(".ckpt")


def policy_state_from_checkpoint(path: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(policy spec fields, policy state_dict)`` of the ``PolicyModule`` checkpoint at ``path``.

    Raises :class:`UserError` naming the file when it is not a loadable checkpoint, holds no saved policy
    spec (not written by a ``PolicyModule``), or no ``policy.*`` weights (e.g. a sharded checkpoint folder
    that was never consolidated).
    """
    checkpoint = load_checkpoint(path)
    if checkpoint is None:
        raise UserError(f"checkpoint {path} is a folder or a name the Trainer resolves: give a .ckpt file")
    spec = (checkpoint.get("hyper_parameters") or {}).get("policy")
    if not isinstance(spec, dict):
        raise UserError(f"checkpoint {path} has no policy spec (hyper_parameters.policy); it was not written by "
                        "a PolicyModule")
    state = {k[len(POLICY_PREFIX):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(POLICY_PREFIX)}
    if not state:
        raise UserError(f"checkpoint {path} holds no policy weights (no state_dict key starts with "
                        f"{POLICY_PREFIX!r})")
    return dict(spec), state

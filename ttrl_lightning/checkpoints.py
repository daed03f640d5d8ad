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
    return checkpoint


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

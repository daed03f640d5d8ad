"""What a model is, wherever it lies: SHA-256 digests of weights, so that a study compares a start by its digest,
never by how its path is spelled."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

__all__ = ["state_dict_digest", "folder_digest", "weights_digest"]


def state_dict_digest(state_dict: Mapping) -> str:
    """SHA-256 over a state dict's tensors in name order, each as its name and raw bytes."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(state_dict.items()):
        if not isinstance(tensor, torch.Tensor):
            continue
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()


def folder_digest(folder: str) -> str:
    """SHA-256 over the names and SHA-256s of a checkpoint folder's ``*.safetensors`` files (the files' bytes)."""
    from ..errors import UserError
    from ..modules.disk_weights import file_digest

    names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not names:
        raise UserError(f"{folder} holds no *.safetensors weights")
    h = hashlib.sha256()
    for name in names:
        h.update(f"{name} {file_digest(os.path.join(folder, name))}\n".encode())
    return h.hexdigest()


def weights_digest(path: str) -> str:
    """The digest of the weights at ``path``: a checkpoint folder (:func:`folder_digest`) or a Lightning
    ``.ckpt`` file (:func:`state_dict_digest` of its ``state_dict``: the optimizer state and the file's other
    bytes, which differ between two saves of the same weights, are left out)."""
    from ..errors import UserError

    if os.path.isdir(path):
        return folder_digest(path)
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001  (a torn or foreign file: one line naming it)
        raise UserError(f"{path}: not a readable checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state, Mapping) or not state:
        raise UserError(f"{path}: a checkpoint without a state_dict mapping")
    return state_dict_digest(state)

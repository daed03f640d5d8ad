"""``DiskWeights``: a frozen model whose parameters live in a safetensors file between its uses.

GRPO's initial-policy reference (``grpo.reference: initial``) is read once a step, by the no-grad reference
pass, and held the whole step: in fp32 a second copy of the policy (0.54 GB for SmolLM2-135M), resident at the
optimizer step, where a CPU run's memory peaks (policy, gradients, AdamW state and reference;
``benchmarks/training/ttrl_step_breakdown.py``). ``grpo.reference_storage: disk`` writes the reference's
parameters to a file when the fit starts and reads them back for the reference pass only (``loaded()``), so
between passes the reference holds no parameter memory: the same weights, the same log-probs, the cost one
read of the file a step (from the page cache once written; the page cache is not the process's resident
memory).

Between uses every parameter is a ``meta`` tensor of its shape; buffers (rotary frequencies) stay in memory.
Tied parameters (SmolLM2's embedding and LM head) are one tensor in the file and one again when loaded.
"""
from __future__ import annotations

import contextlib
import hashlib
import os

import torch
from torch import nn

from ttrl_lightning.errors import UserError
from ttrl_lightning.safe_files import disk_full_is_one_line

__all__ = ["DiskWeights", "file_digest", "reference_file_name", "claim_reference_version"]

#: the most reference files of one folder (versions ``initial``, ``initial-v1``, ...)
MAX_REFERENCE_VERSIONS = 10_000


def reference_file_name(version: int, rank: int) -> str:
    """The name of rank ``rank``'s reference file of version ``version``: ``initial.rank0.safetensors`` for the
    first run of a folder, ``initial-v1.rank0.safetensors`` for the next (as Lightning versions
    ``config-v1.yaml``)."""
    return f"initial{'' if version == 0 else f'-v{version}'}.rank{rank}.safetensors"


def claim_reference_version(folder: str) -> int:
    """The first version of ``folder`` that no run has written a reference file of (any rank's, or a partial
    one), claimed by creating rank 0's file empty and exclusively, so a run started beside this one takes the
    next: a second run in one folder never overwrites the file the first run's checkpoints name (it could then
    no longer resume). One ``UserError`` past :data:`MAX_REFERENCE_VERSIONS`."""
    os.makedirs(folder, exist_ok=True)
    taken = {name.split(".rank", 1)[0] for name in os.listdir(folder) if ".rank" in name}
    for version in range(MAX_REFERENCE_VERSIONS):
        if reference_file_name(version, 0).split(".rank", 1)[0] in taken:
            continue
        try:
            with open(os.path.join(folder, reference_file_name(version, 0)), "x"):
                return version
        except FileExistsError:  # claimed since the listing
            continue
    raise UserError(f"{folder}: {MAX_REFERENCE_VERSIONS:,} reference files already; remove the ones no "
                    "checkpoint needs, or give the run another folder")


def file_digest(path: str, chunk: int = 1 << 24) -> str:
    """sha256 of the file at ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


class DiskWeights:
    """``model``'s parameters in the safetensors file ``path`` (written by :meth:`write`, or adopted from an
    earlier write by :meth:`adopt` when its digest matches); ``model`` keeps meta parameters between
    :meth:`loaded` contexts."""

    def __init__(self, model: nn.Module, path: str, digest: str):
        self.model, self.path, self.digest = model, path, digest
        #: (module, attribute, meta parameter, name in the file), one per parameter slot (a tied parameter has
        #: two slots and one name)
        self._slots: list[tuple[nn.Module, str, nn.Parameter, str]] = []
        names: dict[int, str] = {id(p): n for n, p in model.named_parameters()}  # first name of each tensor
        metas: dict[int, nn.Parameter] = {}
        for module in model.modules():
            for attr, p in list(module._parameters.items()):
                if p is None:
                    continue
                meta = metas.setdefault(id(p), nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=False))
                self._slots.append((module, attr, meta, names[id(p)]))
        self._unload()

    @classmethod
    def write(cls, model: nn.Module, path: str) -> "DiskWeights":
        """Write ``model``'s parameters (each tensor once) to ``path`` and free them from ``model``."""
        from safetensors.torch import save_file

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tensors = {n: p.detach().contiguous() for n, p in model.named_parameters()}
        tmp = f"{path}.partial"
        try:
            with disk_full_is_one_line(path, "KL reference's weights file"):
                save_file(tensors, tmp)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        os.replace(tmp, path)
        return cls(model, path, file_digest(path))

    @classmethod
    def adopt(cls, model: nn.Module, path: str, digest: str) -> "DiskWeights":
        """``model`` (its parameters replaced) over the file an earlier :meth:`write` left at ``path``, refused
        unless its sha256 is ``digest``."""
        if not os.path.isfile(path):
            raise UserError(f"the reference's weights file {path} is gone: the checkpoint names it (grpo."
                            "reference_storage: disk); put it back, or resume without that checkpoint")
        found = file_digest(path)
        if found != digest:
            raise UserError(f"the reference's weights file {path} changed since the checkpoint was saved "
                            f"(sha256 {found[:12]}..., the checkpoint's {digest[:12]}...)")
        return cls(model, path, digest)

    def _unload(self) -> None:
        for module, attr, meta, _ in self._slots:
            module._parameters[attr] = meta

    @contextlib.contextmanager
    def loaded(self):
        """The model with its parameters read from the file (freed again on exit)."""
        from safetensors.torch import load_file

        tensors = load_file(self.path, device="cpu")
        device = next(iter(self.model.buffers()), torch.empty(0)).device
        real: dict[str, nn.Parameter] = {}
        try:
            for module, attr, meta, name in self._slots:
                if name not in real:
                    t = tensors[name]
                    if t.shape != meta.shape or t.dtype != meta.dtype:
                        raise UserError(f"{self.path}: {name} is {t.dtype} {tuple(t.shape)}, the model's "
                                        f"{meta.dtype} {tuple(meta.shape)}")
                    real[name] = nn.Parameter(t.to(device), requires_grad=False)
                module._parameters[attr] = real[name]
            del tensors
            yield self.model
        finally:
            self._unload()
            real.clear()

    def state(self) -> dict:
        """What a checkpoint keeps to find the file again."""
        return {"path": os.path.abspath(self.path), "sha256": self.digest}

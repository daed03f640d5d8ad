"""``ttrl fit``'s checkpoint writer: ``torch.save`` streamed into the file, installed among the Trainer's plugins.

It lives with the command that builds the Trainer, so that reading checkpoints (``ttrl_lightning.checkpoints``,
imported by ``models``) does not import Lightning.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from ttrl_lightning.safe_files import atomic_write, disk_full_is_one_line


class StreamingCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` writing a local checkpoint without holding it in memory.

    Lightning's writer (``_atomic_save``) serialises the checkpoint into an ``io.BytesIO`` and then writes the
    buffer, so saving costs the checkpoint's size in resident memory for a moment: 1.5 GB for SmolLM2-135M with
    its AdamW state, which made the save the peak of a real-model run (3.8 GB against the training step's 2.9).
    Here ``torch.save`` writes straight into a temporary file beside the target that replaces it when complete
    (``safe_files.atomic_write``: a reader sees the old checkpoint or the new one, never a truncated one). The
    bytes are the same; loading is Lightning's. A disk found full while writing is one line naming the file
    (``safe_files.disk_full_is_one_line``), the previous checkpoint kept. A path with a protocol (``s3://``, ``file://``, ...) keeps
    Lightning's writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with disk_full_is_one_line(path, "checkpoint"), atomic_write(path, "wb") as fh:
            torch.save(checkpoint, fh)


def with_streaming_checkpoints(config: dict) -> dict:
    """The Trainer's ``config`` with :class:`StreamingCheckpointIO` among its plugins, unless it names a
    checkpoint writer of its own (in ``plugins`` or on a strategy object; Lightning refuses both at once)."""
    plugins = config.get("plugins")
    plugins = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    strategy = config.get("strategy")
    if any(isinstance(p, CheckpointIO) for p in plugins) or getattr(strategy, "_checkpoint_io", None) is not None:
        return config
    return {**config, "plugins": plugins + [StreamingCheckpointIO()]}

"""The loaders every datamodule shares: a prompt-row collate, a DataLoader that resumes mid-epoch, and an
epoch-seeded permutation sampler (``data.datamodules``, ``data.questions``)."""
from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from ttrl_lightning.seeding import derived_generator

__all__ = ["collate_prompts", "ResumableDataLoader", "EpochSeededSampler"]


def collate_prompts(items: list[dict[str, Any]]) -> dict[str, list]:
    """``[{"prompt": p, "gold": a, ...}]`` -> ``{"prompt": [p...], "gold": [a...], ...}``."""
    if not items:
        raise ValueError("empty batch")
    return {k: [x[k] for x in items] for k in items[0]}


class ResumableDataLoader(DataLoader):
    """A DataLoader (no shuffling) that Lightning can checkpoint mid-epoch: ``state_dict`` holds the number
    of batches already yielded this epoch and ``load_state_dict`` makes the next epoch start after them, so a
    run resumed from a mid-epoch checkpoint sees exactly the batches the uninterrupted run saw."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._yielded = 0
        self._skip = 0

    def __iter__(self):
        skip, self._skip = self._skip, 0
        self._yielded = skip
        for i, batch in enumerate(super().__iter__()):
            if i < skip:
                continue
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict:
        return {"yielded": self._yielded}

    def load_state_dict(self, state: dict) -> None:
        self._skip = int(state.get("yielded", 0))


class EpochSeededSampler(torch.utils.data.Sampler):
    """Random permutation of ``range(n)`` seeded by ``derive_seed(seed, "shuffle", epoch)``; Lightning calls
    ``set_epoch`` at the start of every epoch, so a resumed run draws the same order as the uninterrupted
    one."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = derived_generator(self.seed, "shuffle", self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n

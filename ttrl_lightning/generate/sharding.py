"""Data-parallel ``ttrl generate``: which questions a rank samples, and the process group around it.

Under ``torchrun`` (or any launcher that sets ``RANK`` and ``WORLD_SIZE``) rank ``r`` of ``W`` takes the
questions whose row index ``i`` (0-based, in file order) has ``i % W == r``: disjoint shards covering every
question, balanced to within one question. Each question's rollouts are seeded by its row and view alone
(:mod:`.sampler`), so the union of the ranks' rollouts equals a single-process run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["DataParallel", "rank_indices"]


def rank_indices(num_questions: int, rank: int, world_size: int) -> list[int]:
    """Row indices of rank ``rank``'s questions: ``i % world_size == rank``."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    return list(range(rank, num_questions, world_size))


@dataclass
class DataParallel:
    """This process's ``rank`` of ``world_size``, ``local_rank`` (its GPU) and whether it joined a process
    group (``grouped``: then :meth:`barrier` waits for every rank)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    grouped: bool = False

    @classmethod
    def from_environment(cls, backend: str = "gloo") -> "DataParallel":
        """Read ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``; with several ranks and a rendezvous address
        (``MASTER_ADDR``, as torchrun sets it) join a process group of ``backend`` (gloo on CPU)."""
        from ..errors import UserError

        env = {}
        for name, default in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
            text = os.environ.get(name, default)
            try:
                env[name] = int(text)
            except ValueError:
                raise UserError(f"environment variable {name}={text!r} is not an integer") from None
        rank, world, local = env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]
        if world < 1 or not 0 <= rank < world:
            raise UserError(f"environment: RANK={rank} is not in [0, WORLD_SIZE={world})")
        grouped = False
        if world > 1 and os.environ.get("MASTER_ADDR"):
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group(backend=backend, rank=rank, world_size=world)
            grouped = True
        return cls(rank, world, local, grouped)

    def barrier(self) -> None:
        if self.grouped:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.grouped:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()

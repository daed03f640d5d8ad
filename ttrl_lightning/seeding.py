"""One rule for every derived random seed, so runs and resumes replay the same draws.

``derive_seed(seed, stream, step, rank) = seed * 1_000_003 + step * STREAM_STRIDES[stream] + rank``

Each consumer of randomness is a named *stream* (rollout sampling, feedback dropout, data shuffling,
best-of-N subsets); its stride keeps the seeds of different steps of one stream apart. A new consumer adds
a stream here instead of inventing another formula.
"""
from __future__ import annotations

import torch

#: the multiplier of ``seed``: a prime larger than any step count, so (seed, step) pairs do not collide
SEED_STRIDE = 1_000_003

#: stream name -> stride of the step (or epoch / budget) term
STREAM_STRIDES: dict[str, int] = {
    "rollout": 997,            # GRPOModule: sampling of step `global_step` on rank `global_rank`
    "feedback_dropout": 7919,  # SFTModule: tool-output hiding masks of step `global_step`
    "shuffle": 1,              # DataModules: permutation of epoch `epoch`
    "bon_subsets": 1,          # ttrl bon: fixed subsets of budget N
    "calibration": 997,        # TTRLModule: sampling on the labelled dev-cal split (step 0)
    "random_reward": 7919,     # TTRLModule's random_reward control: step `global_step * world_size + global_rank`,
                               # question `rank` (its place in the batch)
    "perturbation": 7919,      # TTRLModule vote perturbations (robustness studies): rows of step `global_step`
    "generate": 2,             # ttrl generate: question `step` (its row in the file), view `rank` (0 / 1)
    "generate_batch": 1009,    # ttrl generate --batch-size B > 1: the batch whose first question is row `step`,
                               # `rank` = B (the batch's questions and views share one engine call)
    "label_noise": 1,          # SceneQADataModule: which training answers are made wrong (step 0)
}


def derive_seed(seed: int, stream: str, step: int = 0, rank: int = 0) -> int:
    """``seed * 1_000_003 + step * STREAM_STRIDES[stream] + rank`` (see the module docstring)."""
    try:
        stride = STREAM_STRIDES[stream]
    except KeyError:
        raise KeyError(f"unknown seed stream {stream!r}; known: {', '.join(sorted(STREAM_STRIDES))}") from None
    return int(seed) * SEED_STRIDE + int(step) * stride + int(rank)


def derived_generator(seed: int, stream: str, step: int = 0, rank: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed`."""
    return torch.Generator().manual_seed(derive_seed(seed, stream, step, rank))

"""The reward-callable protocol shared by every training module.

A reward is any callable ``fn(*, prompts, completions, **columns) -> Sequence[float]`` called with
keyword arguments: ``prompts`` and ``completions`` are lists of R strings (one row per sampled completion,
each prompt repeated N times) and ``columns`` holds the batch's other columns repeated the same way
(``answer`` for generated tasks, a pseudo-label for TTRL, ...), plus ``completion_ids`` (list of R id
lists). This is the keyword convention of TRL's ``GRPOTrainer`` reward functions, so those can be reused.
A reward returns R finite floats; ``None`` entries are not allowed (use 0 and say so).

Rewards are registered by name in ``REWARDS`` so configs can name them; a config can also give a reward
class by ``class_path``/``init_args`` when its ``__call__`` has exactly ``RewardFn.__call__``'s signature
(annotations included: the CLI checks the protocol).
"""
from __future__ import annotations

import math
from typing import Callable, Protocol, Sequence

import torch

from ttrl_lightning.errors import UserError
from ttrl_lightning.registry import Registry


class RewardFn(Protocol):
    def __call__(self, *, prompts: list[str], completions: list[str], **columns) -> Sequence[float]: ...


REWARDS: Registry[Callable[..., RewardFn]] = Registry("reward")


def resolve_reward(spec: str | RewardFn) -> RewardFn:
    """A reward from its registry name (factory called with no arguments) or a callable as is; an unknown name
    or a non-callable raises :class:`~ttrl_lightning.errors.UserError` listing the registered names."""
    if isinstance(spec, str):
        if spec not in REWARDS:
            raise UserError(f"unknown reward {spec!r}; known: {', '.join(REWARDS.names())}")
        return REWARDS[spec]()
    if not callable(spec):
        raise UserError(f"a reward must be a registered name ({', '.join(REWARDS.names())}) or a callable, "
                        f"got {type(spec).__name__}")
    return spec


def call_reward(fn: RewardFn, prompts: list[str], completions: list[str], **columns) -> torch.Tensor:
    """Call ``fn`` and check its output: R finite numbers -> float32 tensor [R]."""
    out = fn(prompts=prompts, completions=completions, **columns)
    out = list(out)
    if len(out) != len(completions):
        name = getattr(fn, "__name__", type(fn).__name__)
        raise ValueError(f"reward {name} returned {len(out)} values for {len(completions)} completions")
    for i, v in enumerate(out):
        if v is None or not math.isfinite(float(v)):
            name = getattr(fn, "__name__", type(fn).__name__)
            raise ValueError(f"reward {name} returned a non-finite value {v!r} at row {i}")
    return torch.tensor([float(v) for v in out], dtype=torch.float32)

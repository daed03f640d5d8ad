"""Reward callables: the protocol (``base``) and simple task rewards (``simple``), registered in ``REWARDS``."""
from ttrl_lightning.rewards.base import REWARDS, RewardFn, call_reward, resolve_reward
from ttrl_lightning.rewards import simple as _simple  # noqa: F401  (registers the simple rewards)

__all__ = ["REWARDS", "RewardFn", "call_reward", "resolve_reward"]

"""Rollout engines: the ``RolloutEngine`` interface and the Hugging Face ``generate`` engine."""
from ttrl_lightning.rollout.base import RolloutEngine, Rollouts, SamplingParams
from ttrl_lightning.rollout.hf import HFGenerateEngine

__all__ = ["RolloutEngine", "Rollouts", "SamplingParams", "HFGenerateEngine"]

"""Rollout engines: the ``RolloutEngine`` interface, the Hugging Face ``generate`` engine and the rollout
record (``Rollouts``), which ``records_from_rollouts`` turns into rollout-pool records."""
from ttrl_lightning.rollout.base import RolloutEngine, Rollouts, SamplingParams
from ttrl_lightning.rollout.hf import HFGenerateEngine
from ttrl_lightning.rollout.records import records_from_rollouts

__all__ = ["RolloutEngine", "Rollouts", "SamplingParams", "HFGenerateEngine", "records_from_rollouts"]

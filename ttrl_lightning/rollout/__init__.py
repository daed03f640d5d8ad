"""Rollout engines: the ``RolloutEngine`` interface, the engine registry ``ROLLOUT_ENGINES`` (``"hf"``: Hugging
Face ``generate``; ``"vllm"``: a colocated vLLM engine) and the rollout record (``Rollouts``), which
``records_from_rollouts`` turns into rollout-pool records."""
from ttrl_lightning.rollout.agent import AgentEngine
from ttrl_lightning.rollout.base import ROLLOUT_ENGINES, RolloutEngine, Rollouts, SamplingParams, build_engine
from ttrl_lightning.rollout.hf import HFGenerateEngine
from ttrl_lightning.rollout.records import records_from_rollouts
from ttrl_lightning.rollout.vllm_engine import VLLMEngine

__all__ = ["ROLLOUT_ENGINES", "RolloutEngine", "Rollouts", "SamplingParams", "build_engine", "HFGenerateEngine", "AgentEngine",
           "VLLMEngine", "records_from_rollouts"]

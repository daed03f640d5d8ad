"""Hugging Face integration of the signal ops: a ``ttrl_mass`` attention function registered with
transformers, ``score_rollouts`` (teacher-forced replay) and a generation hook (``generate_with_signals``)."""
from .attention import ATTN_NAME, AttentionMassRecorder, mass_attention, recording, register, use_mass_attention
from .generation import GenerationSignalRecorder, StepLogitsSignalRecorder, generate_with_signals
from .groups import GENERATED, GROUP_NAMES, IMAGE, NUM_GROUPS, PAD, PROMPT, SPECIAL, key_groups_from_ids
from .scoring import RolloutSignals, score_rollouts, visual_engagement_from_mass

__all__ = [
    "ATTN_NAME", "AttentionMassRecorder", "GenerationSignalRecorder", "StepLogitsSignalRecorder", "RolloutSignals", "mass_attention",
    "recording", "register", "use_mass_attention", "generate_with_signals", "score_rollouts",
    "visual_engagement_from_mass", "key_groups_from_ids", "GROUP_NAMES", "NUM_GROUPS", "PAD", "IMAGE", "PROMPT",
    "GENERATED", "SPECIAL",
]

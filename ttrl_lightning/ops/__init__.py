"""Fused per-token ops: token statistics without ``[M, V]`` logits, attention with group mass without
``[Tq, Tk]`` maps, and differentiable log-probs of a linear LM head without ``[M, V]`` logits
(``linear_logprobs``, the training loss's). Backends: see ``ttrl_lightning.ops.backends`` and
docs/kernels.md."""
from .backends import available_backends, selected_backend
from .functional import attention_with_mass, token_stats
from .linear_logprobs import linear_logprobs
from .modules import TokenStatsHead

__all__ = ["token_stats", "attention_with_mass", "linear_logprobs", "TokenStatsHead", "available_backends",
           "selected_backend"]

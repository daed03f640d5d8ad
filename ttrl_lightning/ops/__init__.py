"""Fused per-token signal ops: token statistics without ``[M, V]`` logits, attention with group mass
without ``[Tq, Tk]`` maps. Backends: see ``ttrl_lightning.ops.backends`` and docs/kernels.md."""
from .backends import available_backends, selected_backend
from .functional import attention_with_mass, token_stats
from .modules import TokenStatsHead

__all__ = ["token_stats", "attention_with_mass", "TokenStatsHead", "available_backends", "selected_backend"]

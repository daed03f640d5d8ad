"""Thin module layer over the functional ops (Liger-style: functional op -> module)."""
from __future__ import annotations

import torch

from .functional import token_stats


class TokenStatsHead(torch.nn.Module):
    """Wraps an LM head (``nn.Linear`` with weight [V, H]) and returns per-token statistics instead of logits.

    forward(hidden [..., H], token_ids [...]) -> dict of float32 tensors shaped like token_ids:
    logprob, entropy, self_certainty, lse (see ``ttrl_lightning.ops.token_stats``); never builds [..., V].
    """

    def __init__(self, lm_head: torch.nn.Linear, temperature: float = 1.0):
        super().__init__()
        self.lm_head = lm_head
        self.temperature = float(temperature)

    def forward(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        if hidden.shape[:-1] != token_ids.shape:
            raise ValueError(f"hidden {tuple(hidden.shape)} and token_ids {tuple(token_ids.shape)} disagree")
        flat = token_stats(hidden.reshape(-1, hidden.shape[-1]), self.lm_head.weight, token_ids.reshape(-1),
                           self.lm_head.bias, self.temperature)
        names = ("logprob", "entropy", "self_certainty", "lse")
        return {n: t.view(token_ids.shape) for n, t in zip(names, flat)}

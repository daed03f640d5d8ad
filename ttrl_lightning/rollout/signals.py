"""Per-token signals of sampled tokens, computed from the sampler's logits.

This is the seam to the fused signal ops: backends are registered by name in ``TOKEN_SIGNALS``; the
plain-PyTorch ``"torch"`` backend is always present, and a fused backend (``ttrl_lightning.ops``) can
register itself under another name and be picked with ``HFGenerateEngine(signal_backend=...)``.
"""
from __future__ import annotations

import torch

from ttrl_lightning.registry import Registry

TOKEN_SIGNALS: Registry = Registry("token-signal backend")


@TOKEN_SIGNALS.register("torch")
def torch_token_signals(logits: torch.Tensor, token_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """logits: [R, C, V], token_ids: [R, C] -> ``logprob`` log p(y_t) = z_y - logsumexp(z) and
    ``entropy`` H_t = logsumexp(z) - sum_j p_j z_j, both [R, C], float32."""
    if logits.shape[:2] != token_ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and token_ids {tuple(token_ids.shape)} disagree")
    z = logits.float()
    lse = torch.logsumexp(z, dim=-1)
    logprob = z.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1) - lse
    p = torch.softmax(z, dim=-1)
    entropy = lse - (p * z).sum(-1)
    return {"logprob": logprob, "entropy": entropy}

"""Per-token signals of sampled tokens, computed from the sampler's logits.

This is the seam to the fused signal ops: backends are registered by name in ``TOKEN_SIGNALS``; the
plain-PyTorch ``"torch"`` backend is always present, and a fused backend (``ttrl_lightning.ops``) can
register itself under another name and be picked with ``HFGenerateEngine(signal_backend=...)``.
"""
from __future__ import annotations

import torch

from ttrl_lightning.registry import Registry
from ttrl_lightning.signals import token_signals

TOKEN_SIGNALS: Registry = Registry("token-signal backend")


# the plain-PyTorch reference of ttrl_lightning.signals, batched over [R, C, V]: logprob, entropy, self_certainty
TOKEN_SIGNALS.register("torch", token_signals)


@torch.no_grad()
def replay_token_signals(model, rollouts, temperature: float = 1.0, backend: str | None = None) -> dict:
    """Per-token signals of a finished rollout batch by a replay pass through the fused signal op.

    One forward of the decoder (no [R, C, V] logits), then ``ttrl_lightning.ops.token_stats`` on the final
    hidden states of the positions that predict each completion token and the LM head. Returns
    ``logprob``, ``entropy``, ``self_certainty`` as [R, C] float32 tensors (0 where completion_mask is 0).
    ``backend``: the ops backend (None = the ops' automatic choice).
    """
    from ttrl_lightning.ops import token_stats

    ids, attn = rollouts.input_ids(), rollouts.attention_mask()
    R, C = rollouts.completion_ids.shape
    pos = (attn.long().cumsum(-1) - 1).clamp(min=0)
    was_training = model.training
    model.eval()
    try:
        hidden = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state
    finally:
        model.train(was_training)
    h = hidden[:, -C - 1:-1]  # position t predicts completion token t
    head = model.get_output_embeddings()
    mask = rollouts.completion_mask.bool()
    lp, ent, sc, _ = token_stats(h[mask].float(), head.weight.float(), rollouts.completion_ids[mask],
                                 None if getattr(head, "bias", None) is None else head.bias.float(),
                                 temperature, backend=backend)
    out = {}
    for name, v in (("logprob", lp), ("entropy", ent), ("self_certainty", sc)):
        full = torch.zeros(R, C, dtype=torch.float32, device=h.device)
        full[mask] = v
        out[name] = full
    return out

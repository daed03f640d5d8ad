"""Per-token signals of sampled tokens: from the sampler's logits, or by a replay of the finished rollouts.

This is the seam to the fused signal ops. Backends that turn ``generate``'s logits into signals are
registered by name in ``TOKEN_SIGNALS``; the plain-PyTorch ``"torch"`` backend is always present, and a
fused backend (``ttrl_lightning.ops``) can register itself under another name and be picked with
``HFGenerateEngine(signal_backend=...)``. The replay (``replay_token_signals``) is the package's one
teacher-forced replay, ``integrations.score_rollouts``, run on a ``Rollouts`` batch.

Every signal tensor is [R, C] float32, NaN outside the completion mask (``ttrl_lightning.masking``).
"""
from __future__ import annotations

import torch

from ttrl_lightning.registry import Registry
from ttrl_lightning.signals import token_signals

TOKEN_SIGNALS: Registry = Registry("token-signal backend")


# the plain-PyTorch reference of ttrl_lightning.signals, batched over [R, C, V]: logprob, entropy, self_certainty
TOKEN_SIGNALS.register("torch", token_signals)

#: The signals a replay without attention recording returns, named as the pool schema's per-token fields.
REPLAY_SIGNALS = ("logprob", "entropy", "self_certainty")
#: What a replay with attention recording adds when a row shows an image (LookBack's A_t, VisConf's v_t).
ATTENTION_SIGNALS = ("image_attention", "visual_engagement")


def mask_signals(signals: dict[str, torch.Tensor], completion_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """[R, C] signals -> float32 with NaN where ``completion_mask`` is 0 (the package's padding convention)."""
    keep = completion_mask.bool()
    return {k: torch.where(keep, v.float(), float("nan")) for k, v in signals.items()}


@torch.no_grad()
def replay_token_signals(model, rollouts, temperature: float = 1.0, backend: str | None = None,
                         attention: bool = False, tokenizer=None) -> dict:
    """Per-token signals of a finished rollout batch by a teacher-forced replay (no [R, C, V] logits).

    Builds the [R, P + C] batch (``rollouts.forward_inputs()``: prompt then completion, position ids from
    the attention mask, so left padding does not shift positions, or a VLM rollout's pixel inputs) and runs ``integrations.score_rollouts`` without attention
    recording: one forward of the decoder, then ``ttrl_lightning.ops.token_stats`` on the final hidden
    states of the positions that predict each completion token and the LM head. Returns ``logprob``,
    ``entropy``, ``self_certainty`` as [R, C] float32 tensors, NaN where completion_mask is 0.
    ``backend``: the ops backend (None = the ops' automatic choice). ``attention`` (rollouts with images):
    the replay also records the streaming attention mass (``ops.attention_with_mass``, never an ``[H, T, T]``
    map) and returns ``image_attention`` and ``visual_engagement`` (VisConf sec. 3.1), NaN on rows without an
    image; ``tokenizer`` puts its special tokens outside the prompt key group, as while sampling.
    """
    from ttrl_lightning.integrations.scoring import score_rollouts

    P = rollouts.prompt_ids.shape[1]
    batch = {**rollouts.forward_inputs(),
             "completion_mask": torch.cat([torch.zeros_like(rollouts.prompt_mask), rollouts.completion_mask], 1)}
    sig = score_rollouts(model, batch, temperature, record_attention=attention, backend=backend, tokenizer=tokenizer)
    names = REPLAY_SIGNALS + (ATTENTION_SIGNALS if attention else ())
    return {name: getattr(sig, name)[:, P:] for name in names if getattr(sig, name) is not None}

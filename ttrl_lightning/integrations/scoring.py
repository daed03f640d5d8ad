"""Teacher-forced replay of prompt + completion that yields the per-token rollout signals (VisConf App. C).

One forward of the base model (with the ``ttrl_mass`` attention function when attention is recorded) gives
the final hidden states and the layer/head-averaged key-group attention mass; ``token_stats`` on the LM
head gives log-prob, entropy and self-certainty without materialising [T, V] logits. Signals of completion
token t come from the position that predicts it (t - 1), as during sampling. This is the package's one
replay path: ``rollout.signals.replay_token_signals`` runs it on a ``Rollouts`` batch.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ttrl_lightning.ops import token_stats

from .attention import AttentionMassRecorder, mass_attention, recording
from .groups import GENERATED, GROUP_NAMES, IMAGE, PROMPT, image_token_ids, key_groups_from_ids, special_token_ids

_MODEL_INPUTS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "mm_token_type_ids",
                 "position_ids", "rope_deltas", "second_per_grid_ts")

#: Per-token signal fields of ``RolloutSignals``, named as the pool schema's per-token fields.
SIGNAL_FIELDS = ("logprob", "entropy", "self_certainty", "image_attention", "visual_engagement")


@dataclass
class RolloutSignals:
    """Per-token signals aligned with the input tokens: every tensor is [B, T] (float32) and holds the value
    for the token at that position; positions outside ``completion_mask`` are NaN (``masking`` convention).

    logprob, entropy, self_certainty: from the next-token distribution that produced the token;
    group_mass: [B, T, G] attention mass per key group (groups.GROUP_NAMES), averaged over layers and heads;
    image_attention: LookBack's A_t, the image mass (None when no sequence has image keys);
    visual_engagement: VisConf's v_t = A_I / (A_I + A_P + A_G) (None when no sequence has image keys; NaN
    for sequences without image keys).
    """

    completion_mask: torch.Tensor
    logprob: torch.Tensor
    entropy: torch.Tensor
    self_certainty: torch.Tensor
    group_mass: torch.Tensor | None
    image_attention: torch.Tensor | None
    visual_engagement: torch.Tensor | None

    def per_rollout(self) -> list[dict[str, torch.Tensor | None]]:
        """One dict per sequence with 1-D tensors over its completion tokens, in order."""
        rows = []
        for b in range(self.completion_mask.shape[0]):
            sel = self.completion_mask[b]
            row = {}
            for name in SIGNAL_FIELDS:
                value = getattr(self, name)
                row[name] = None if value is None else value[b][sel]
            rows.append(row)
        return rows


def visual_engagement_from_mass(group_mass: torch.Tensor) -> torch.Tensor:
    """v = A_I / (A_I + A_P + A_G) (VisConf Sec. 3); group_mass: [..., G]. NaN where the denominator is 0."""
    a_i, a_p, a_g = group_mass[..., IMAGE], group_mass[..., PROMPT], group_mass[..., GENERATED]
    den = a_i + a_p + a_g
    return torch.where(den > 0, a_i / den.clamp_min(torch.finfo(den.dtype).tiny), torch.full_like(den, float("nan")))


#: config fields that change the logits after the head (``h W^T + b``), with the values that leave them
#: unchanged: Gemma 2/3 soft-capping ``c tanh(z / c)``, Cohere's ``logit_scale``, Granite's
#: ``logits_scaling``. Signals computed from ``h`` and the head alone would be those of another distribution.
LOGIT_TRANSFORMS: dict[str, tuple] = {
    "final_logit_softcapping": (None,),
    "logit_scale": (None, 1.0),
    "logits_scaling": (None, 1.0),
}


def logit_transform_reason(model) -> str | None:
    """None when ``model``'s config applies no :data:`LOGIT_TRANSFORMS` after its head, else which one."""
    config = getattr(model, "config", None)
    for cfg in (config, getattr(config, "text_config", None)):
        if cfg is None:
            continue
        for name, neutral in LOGIT_TRANSFORMS.items():
            value = getattr(cfg, name, None)
            if value not in neutral:
                return f"its config sets {name}={value!r} (the logits are transformed after the LM head)"
    return None


def _check_supported(model) -> None:
    reason = logit_transform_reason(model)
    if reason is not None:
        raise NotImplementedError(f"score_rollouts: model not supported: {reason}")


def base_model(model):
    """The model without its LM head (a PEFT wrapper is looked through): the module that takes the
    processor's inputs (``pixel_values`` ...) and returns the final hidden states."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(inner, inner.base_model_prefix)


@torch.no_grad()
def score_rollouts(model, batch: dict, temperature: float = 1.0, record_attention: bool = True,
                   backend: str | None = None, tokenizer=None) -> RolloutSignals:
    """Per-token signals of prompt + completion sequences by a teacher-forced replay.

    batch: ``input_ids`` [B, T] (prompt + completion, padded), ``attention_mask`` [B, T] (1 = token),
    ``completion_mask`` [B, T] (1 = completion token; the first completion token must follow at least one
    token) and, for vision-language models, the processor outputs (``pixel_values``, ``image_grid_thw``,
    ``mm_token_type_ids`` ...) or explicit ``position_ids``. ``temperature`` divides the logits (use the
    sampling temperature). ``backend``: the ``token_stats`` backend (None = the ops' automatic choice).
    ``tokenizer``: its ``all_special_ids`` join the config's special ids in the SPECIAL key group, so their
    attention mass stays out of v = A_I / (A_I + A_P + A_G); without it only the config's special ids are
    excluded and the tokenizer's other special tokens (e.g. ``<|im_start|>``) count as prompt.
    The model runs in eval mode for the replay and gets its previous mode back.
    """
    input_ids = batch["input_ids"]
    attention_mask = batch.get("attention_mask")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if "completion_mask" not in batch:
        raise ValueError(f"score_rollouts: the batch needs 'completion_mask' [B, T] (1 = completion token); "
                         f"it has {sorted(batch)}")
    completion_mask = batch["completion_mask"]
    if input_ids.dim() != 2 or completion_mask.shape != input_ids.shape or attention_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids, attention_mask and completion_mask must be [B, T], got "
                         f"{tuple(input_ids.shape)}, {tuple(attention_mask.shape)} and {tuple(completion_mask.shape)}")
    completion_mask = completion_mask.bool() & attention_mask.bool()
    if bool(completion_mask[:, 0].any()):
        raise ValueError("a completion token at position 0 has no preceding position to predict it")
    _check_supported(model)
    extra = {k: batch[k] for k in _MODEL_INPUTS if batch.get(k) is not None}
    recorder = groups = None
    if record_attention:
        groups = key_groups_from_ids(input_ids, attention_mask, completion_mask, image_token_ids(model.config),
                                     special_token_ids(model.config, tokenizer), batch.get("mm_token_type_ids"))
        recorder = AttentionMassRecorder(groups)
    was_training = model.training
    model.eval()
    try:
        with mass_attention(model, record_attention), \
                recording(recorder) if record_attention else contextlib.nullcontext():
            hidden = base_model(model)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                                        **extra)[0]
    finally:
        model.train(was_training)
    # token t is predicted from position t - 1
    pred_pos = completion_mask[:, 1:]
    h = hidden[:, :-1][pred_pos]
    targets = input_ids[:, 1:][pred_pos]
    head = model.get_output_embeddings()
    logprob, entropy, sc, _ = token_stats(h, head.weight, targets, getattr(head, "bias", None), temperature,
                                          backend=backend)

    def scatter(values: torch.Tensor) -> torch.Tensor:
        full = torch.full(input_ids.shape, float("nan"), device=values.device)
        full[:, 1:][pred_pos] = values
        return full

    group_mass = image_attention = engagement = None
    if record_attention:
        mass = recorder.mass()  # [B, T, G] per query position
        group_mass = torch.full((*input_ids.shape, mass.shape[-1]), float("nan"), device=mass.device)
        group_mass[:, 1:][pred_pos] = mass[:, :-1][pred_pos]
        has_image = (groups == IMAGE).any(1)
        if bool(has_image.any()):
            image_attention = torch.where(has_image[:, None], group_mass[..., IMAGE], float("nan"))
            engagement = torch.where(has_image[:, None], visual_engagement_from_mass(group_mass), float("nan"))
    return RolloutSignals(completion_mask, scatter(logprob), scatter(entropy), scatter(sc), group_mass,
                          image_attention, engagement)


__all__ = ["RolloutSignals", "SIGNAL_FIELDS", "score_rollouts", "visual_engagement_from_mass", "GROUP_NAMES"]

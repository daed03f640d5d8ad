"""transformers integration: an attention function that also records per-token key-group attention mass.

``register()`` adds ``"ttrl_mass"`` to transformers' ``AttentionInterface`` (and the same name to the
``AttentionMaskInterface``, reusing the SDPA mask builder, so causal and padding masks are still built).
For causal text-decoder layers, while an ``AttentionMassRecorder`` is active, the function runs
``ttrl_lightning.ops.attention_with_mass`` (exact output + mass in one streaming pass); every other call
(vision towers, no recorder) goes to transformers' SDPA function unchanged.
"""
from __future__ import annotations

import contextlib
import threading

import torch

from ttrl_lightning.ops import attention_with_mass

from .groups import GENERATED, NUM_GROUPS, PAD

ATTN_NAME = "ttrl_mass"
_state = threading.local()


class AttentionMassRecorder:
    """Accumulates the group mass of every causal layer, summed over heads, per forward call ("step").

    key_groups: [B, T0] groups of the keys present at the first forward; keys appended later (generation)
    are GENERATED. After the forwards, ``mass()`` is [B, T_queries, G]: the mass averaged over all layers
    and heads (VisConf Sec. 3 alpha-bar summed within each group), queries of all steps concatenated.
    """

    def __init__(self, key_groups: torch.Tensor, num_groups: int = NUM_GROUPS):
        self.key_groups = key_groups.long()
        self.num_groups = num_groups
        self._steps: list[list] = []  # per step: [mass sum over layers and heads [B, Tq, G], heads counted]
        self._last_layer = None

    def track_keys(self, num_keys: int, batch: int | None = None) -> None:
        """Follow the keys of the forward about to run: rows repeated when ``batch`` is a multiple of the
        recorded sequences (``generate(num_return_sequences=n)`` / beam search repeat every prompt n times,
        consecutively), keys appended since the first forward labelled GENERATED."""
        rows = self.key_groups.shape[0]
        if batch is not None and batch != rows:
            if batch % rows:
                raise ValueError(f"attention batch {batch} is not a multiple of the recorder's {rows} sequences")
            self.key_groups = self.key_groups.repeat_interleave(batch // rows, dim=0)
        have = self.key_groups.shape[1]
        if num_keys > have:
            extra = self.key_groups.new_full((self.key_groups.shape[0], num_keys - have), GENERATED)
            self.key_groups = torch.cat([self.key_groups, extra], dim=1)
        elif num_keys < have and not self._steps:
            raise ValueError(f"the recorder has groups for {have} keys but the first forward sees {num_keys}")

    def groups_for(self, num_keys: int, device) -> torch.Tensor:
        """[B, num_keys] groups of the first ``num_keys`` keys (no side effects; ``track_keys`` first)."""
        if num_keys > self.key_groups.shape[1]:
            raise ValueError(f"the recorder tracks {self.key_groups.shape[1]} keys, asked for {num_keys}: "
                             "call track_keys first")
        return self.key_groups[:, :num_keys].to(device)

    def add(self, layer_idx: int | None, mass: torch.Tensor) -> None:
        """mass: [B, H, Tq, G] float32 of one layer."""
        new_step = not self._steps or (layer_idx is not None and self._last_layer is not None
                                       and layer_idx <= self._last_layer)
        if new_step:
            self._steps.append([torch.zeros(mass.shape[0], mass.shape[2], mass.shape[3], device=mass.device), 0])
        step = self._steps[-1]
        if step[0].shape[1] != mass.shape[2]:
            raise RuntimeError("layers of one forward saw different query lengths")
        step[0] += mass.sum(1)
        step[1] += mass.shape[1]
        self._last_layer = layer_idx

    def mass(self) -> torch.Tensor:
        """[B, T_queries, G]: the recorded mass averaged over layers and heads, all steps concatenated."""
        if not self._steps:
            raise RuntimeError("no attention was recorded: is the model using attn_implementation='ttrl_mass'?")
        return torch.cat([s / n for s, n in self._steps], dim=1)

    @property
    def num_steps(self) -> int:
        return len(self._steps)


def active_recorder() -> AttentionMassRecorder | None:
    return getattr(_state, "recorder", None)


@contextlib.contextmanager
def recording(recorder: AttentionMassRecorder):
    """Make ``recorder`` receive the mass of every ``ttrl_mass`` attention call in this thread."""
    previous = active_recorder()
    _state.recorder = recorder
    try:
        yield recorder
    finally:
        _state.recorder = previous


def _keys_visible_to_last_query(attention_mask: torch.Tensor, batch: int) -> torch.Tensor:
    """[B, Tk] bool from a 4D mask (bool: True = attend; float: 0 = attend): the last query row of a causal
    mask sees exactly the non-padding keys."""
    last = attention_mask[:, 0, -1, :]
    visible = last if last.dtype == torch.bool else last == 0
    return visible.expand(batch, -1)


def ttrl_mass_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                        **kwargs):
    """AttentionInterface function: ``(module, q [B,Hq,Tq,d], k/v [B,Hkv,Tk,d], mask) -> (out [B,Tq,Hq,d], None)``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    recorder = active_recorder()
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if recorder is None or not causal:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    window = kwargs.get("sliding_window")
    if window is not None and window < key.shape[2]:
        raise NotImplementedError("ttrl_mass attention does not support sliding-window layers shorter than the context")
    if dropout and module.training:
        raise NotImplementedError("ttrl_mass attention records signals in eval mode only (dropout > 0)")
    recorder.track_keys(key.shape[2], key.shape[0])
    groups = recorder.groups_for(key.shape[2], key.device)
    if attention_mask is not None:
        groups = torch.where(_keys_visible_to_last_query(attention_mask, key.shape[0]), groups, PAD)
    out, mass = attention_with_mass(query, key, value, groups, recorder.num_groups, causal=True, scale=scaling)
    recorder.add(getattr(module, "layer_idx", None), mass)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Register ``ttrl_mass`` with transformers (idempotent); returns the name to pass as attn_implementation."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, ttrl_mass_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
    return ATTN_NAME


def use_mass_attention(model) -> None:
    """Switch a loaded model (and its sub-models) to the ``ttrl_mass`` attention function."""
    register()
    model.set_attn_implementation(ATTN_NAME)


@contextlib.contextmanager
def mass_attention(model, enabled: bool = True):
    """Use the ``ttrl_mass`` attention function inside the block and restore the previous one after it."""
    previous = model.config._attn_implementation
    switch = enabled and previous != ATTN_NAME
    if switch:
        use_mass_attention(model)
    try:
        yield model
    finally:
        if switch:
            model.set_attn_implementation(previous)

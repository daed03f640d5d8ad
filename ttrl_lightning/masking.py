"""Mask conventions and the small mask rules every part of the package shares.

* ``IGNORE_INDEX = -100``: label of a position that no loss is taken on (the value ``torch.nn.functional
  .cross_entropy`` ignores by default).
* ``completion_mask`` [R, C]: 1 on generated (completion) tokens up to and including the end-of-sequence
  token, 0 on padding after it. It is the one name of this concept in the package.
* Per-token signals of rollouts are float32 with NaN outside the completion mask (a padded value can never
  be read as a real one without an error or a NaN showing up).
"""
from __future__ import annotations

import torch

IGNORE_INDEX = -100


def masked_token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(x * mask) / max(sum(mask), 1): the mean of ``x`` over the tokens where ``mask`` is set."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] attention mask (left padding allowed) -> position ids [B, T]: 0 at each row's first token,
    counting only attended tokens; padding positions get 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_mask_at_eos(ids: torch.Tensor, eos_id: int | None) -> torch.Tensor:
    """ids: [R, C] -> mask [R, C] (int64): 1 up to and including the first ``eos_id`` of each row; all ones
    when ``eos_id`` is None."""
    if eos_id is None:
        return torch.ones_like(ids, dtype=torch.long)
    is_eos = (ids == eos_id).long()
    before = torch.cumsum(is_eos, dim=1) - is_eos  # number of EOS strictly before t
    return (before == 0).long()

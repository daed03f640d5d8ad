"""The finishing rules every rollout engine applies to its sampled rows (HF ``generate``, prompt-shared
sampling, vLLM, the agent's turns): where a completion ends (EOS, the first stop string) and what its text is.
One module both engines import, so a rule changes in one place."""
from __future__ import annotations

from typing import Sequence

import torch

from ttrl_lightning.masking import completion_mask_at_eos
from ttrl_lightning.rollout.base import Rollouts, SamplingParams

__all__ = ["cut_at_stop_strings", "finish_rollouts"]


def cut_at_stop_strings(tokenizer, ids: torch.Tensor, mask: torch.Tensor, stop: Sequence[str]) -> torch.Tensor:
    """Shorten ``mask`` [R, C] so each row ends at the token that completes the first stop string."""
    if not stop:
        return mask
    mask = mask.clone()
    for r in range(ids.shape[0]):
        text = ""
        n = int(mask[r].sum())
        for t in range(n):
            text += tokenizer.decode([int(ids[r, t])])
            if any(s in text[-(len(s) + 16):] for s in stop):
                mask[r, t + 1:] = 0
                break
    return mask


def finish_rollouts(tokenizer, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                    params: SamplingParams, lengths: torch.Tensor | None = None) -> Rollouts:
    """The ``Rollouts`` of sampled rows, the one set of rules every engine applies: the completion mask runs up
    to and including EOS (``completion_mask_at_eos``) and is cut at the token that completes the first stop
    string (``cut_at_stop_strings``), tokens outside it become padding, the texts are the tokenizer's decoding
    of the kept tokens, rows are prompt-major (``params.n`` per prompt). prompt_ids / prompt_mask: [R, P];
    completion_ids: [R, C]; ``lengths`` [R]: how many tokens of each row were sampled (None: all C)."""
    tok = tokenizer
    mask = completion_mask_at_eos(completion_ids, tok.eos_token_id)
    if lengths is not None:
        mask = mask * (torch.arange(completion_ids.shape[1], device=mask.device)[None, :]
                       < lengths.to(mask.device)[:, None])
    mask = cut_at_stop_strings(tok, completion_ids, mask, params.stop)
    comp = torch.where(mask.bool(), completion_ids, torch.full_like(completion_ids, tok.pad_token_id))
    texts = [tok.decode(row[: int(m.sum())].tolist(), skip_special_tokens=True) for row, m in zip(comp, mask)]
    groups = comp.shape[0] // params.n
    return Rollouts(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=comp,
                    completion_mask=mask.to(prompt_mask.dtype), texts=texts,
                    group=torch.arange(groups, device=comp.device).repeat_interleave(params.n), n=params.n)

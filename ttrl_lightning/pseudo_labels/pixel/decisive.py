"""Pixel TTRL's decisive tokens ``D(tau)`` (Pixelis sec. 3.2.3: entropy "on decisive steps") of a text
completion, and the decisive entropy / log-prob of one rollout (``pseudo_labels.pixel``). Agent rollouts get
theirs from their step spans (``rollout.agent.AgentRollouts.decisive_token_masks``)."""
from __future__ import annotations

from typing import Sequence

import torch

from ttrl_lightning.pseudo_labels.pseudo_label import PseudoLabelError
from ttrl_lightning.pseudo_labels.question_votes import QuestionVotes

__all__ = ["decisive_token_mask", "SIGN_SLACK"]

#: per-token entropy below ``-SIGN_SLACK`` or log-probability above ``SIGN_SLACK`` is refused (round-off).
SIGN_SLACK = 1e-5


def decisive_token_mask(completion_ids: Sequence[int], call_start_id: int, call_end_id: int,
                        observation_end_id: int) -> list[bool]:
    """The decisive tokens ``D(tau)`` of one completion (Pixelis sec. 3.2.3: entropy "on decisive steps").

    Decisive steps of a chain-of-thought-action trace (``tools.protocol``: ``<call>name(args)</call>`` then
    the environment's ``<out>result</out>``):

    * every **tool call**: the tokens from a ``call_start_id`` through the next ``call_end_id``, both
      delimiters included (an unterminated call runs to the end);
    * the **final answer step**: every token after the last ``observation_end_id`` (the whole completion when
      no observation was returned, in particular when there is no tool call).

    Everything else (free reasoning between calls, observations written by the tools) is not decisive. A
    completion in which this selects nothing (it ends right after an observation, cut by the token budget,
    without a call) counts every token as decisive, so each rollout has an entropy and a confidence.

    Args:
        completion_ids: the completion's token ids (aligned with its per-token ``entropy`` / ``logprob``).
        call_start_id, call_end_id, observation_end_id: the ids of ``CALL_START``, ``CALL_END`` and
            ``OBSERVATION_END`` in the policy's tokenizer.
    Returns:
        one bool per token.
    """
    ids = []
    for k, t in enumerate(completion_ids):
        if isinstance(t, bool) or not isinstance(t, int):
            if isinstance(t, torch.Tensor) and t.numel() == 1 and not t.dtype.is_floating_point:
                t = int(t)
            else:
                raise TypeError(f"completion_ids[{k}] must be an int token id, got {type(t).__name__}")
        ids.append(t)
    for name, v in (("call_start_id", call_start_id), ("call_end_id", call_end_id),
                    ("observation_end_id", observation_end_id)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int token id, got {type(v).__name__}")
    if len({call_start_id, call_end_id, observation_end_id}) != 3:
        raise ValueError("call_start_id, call_end_id and observation_end_id must be three different ids")
    last_obs = max((k for k, t in enumerate(ids) if t == observation_end_id), default=-1)
    mask = [k > last_obs for k in range(len(ids))]
    in_call = False
    for k, t in enumerate(ids):
        if t == call_start_id:
            in_call = True
        if in_call:
            mask[k] = True
        if t == call_end_id:
            in_call = False
    return mask if any(mask) else [True] * len(ids)


def _decisive(group: QuestionVotes, j: int, masks) -> tuple[torch.Tensor, torch.Tensor]:
    """Vote ``j``'s decisive-token entropy and log-probability arrays, every error naming the field."""
    ent = group.token_signal(j, "entropy", "pixel")
    lp = group.token_signal(j, "logprob", "pixel")
    if ent.numel() != lp.numel():
        raise PseudoLabelError(f"pixel: rollouts[{j}].logprob has {lp.numel()} tokens but entropy has "
                               f"{ent.numel()}")
    mask = None if masks is None else masks[j]
    if mask is not None:
        where = f"pixel: decisive_masks[{j}]"
        if isinstance(mask, (str, bytes)) or not isinstance(mask, (Sequence, torch.Tensor)):
            raise PseudoLabelError(f"{where} must be a list of bools, got {type(mask).__name__}")
        vals = mask.tolist() if isinstance(mask, torch.Tensor) else list(mask)
        for k, b in enumerate(vals):
            if not isinstance(b, bool):
                raise PseudoLabelError(f"{where}[{k}] must be a bool, got {type(b).__name__}")
        if len(vals) != ent.numel():
            raise PseudoLabelError(f"{where} has {len(vals)} entries but rollouts[{j}] has "
                                   f"{ent.numel()} tokens")
        if not any(vals):
            raise PseudoLabelError(f"{where} selects no token (a rollout needs at least one decisive token)")
        keep = torch.tensor(vals, dtype=torch.bool)
        ent, lp = ent[keep], lp[keep]
    for name, x, bad, rule in (("entropy", ent, ent < -SIGN_SLACK, "an entropy must be >= 0"),
                               ("logprob", lp, lp > SIGN_SLACK, "a log-probability must be <= 0")):
        if bool(bad.any()):
            k = int(torch.nonzero(bad)[0])
            raise PseudoLabelError(f"pixel: rollouts[{j}].{name} holds {float(x[k])} at decisive "
                                   f"token {k} ({rule})")
    return ent, lp


def _check_masks(masks, n: int):
    if masks is None:
        return None
    if isinstance(masks, (str, bytes)) or not isinstance(masks, Sequence):
        raise PseudoLabelError(f"pixel: decisive_masks must be a list (one mask or None per rollout), "
                               f"got {type(masks).__name__}")
    if len(masks) != n:
        raise PseudoLabelError(f"pixel: decisive_masks has {len(masks)} entries for {n} rollouts")
    return list(masks)

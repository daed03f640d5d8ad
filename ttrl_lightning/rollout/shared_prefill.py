"""Prompt-shared sampling: each prompt is prefilled once and its KV cache repeated N ways, and rows that have
finished are dropped from the batch instead of being decoded as padding.

``generate`` on ``input_ids.repeat_interleave(n)`` prefills every prompt N times: O(N x prompt) prefill
compute, which dominates for long (image) prompts. Here the B prompts run through the model once, the cache
(a transformers ``DynamicCache``) is expanded with ``batch_repeat_interleave(n)`` and the next-token logits of
the prompt's last position are repeated, so the prefill is O(prompt) and every decode step is as before.

Decoding follows ``generate``'s sampling: the raw next-token logits in float32, then the same logits warpers
in the same order (``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``), then
``torch.multinomial`` of their softmax (``argmax`` when greedy); position ids come from the attention mask
(``cumsum - 1``, padding at 1), as in ``generate``. Until the first row finishes the draws consume the RNG as
``generate``'s do, so for a fixed seed the tokens are the same up to that step; after it the batch is smaller,
the RNG is consumed differently and the samples agree in distribution only (tests/rollout/test_hf.py checks
both).

A vision-language prompt (``model_inputs``: the processor's ``pixel_values``, ``image_grid_thw``,
``mm_token_type_ids``) is prefilled once with its pixels, so its image is encoded once, not N times
(``generate`` expands the pixel inputs per sample and runs the vision tower on every copy). Its positions are
M-RoPE's: the prefill takes the model's own 3-row positions (``get_rope_index``, which also gives the
prompt's ``rope_deltas``: its largest position minus its length), and every generated token is text, at
position ``(text position) + rope_delta`` in all three rows, as ``generate`` continues them. The tokens the
model must never write (``suppress``: the image placeholders) get ``-inf`` before the warpers, as
``generate``'s ``suppress_tokens``.
"""
from __future__ import annotations

from typing import Callable

import torch

from ttrl_lightning.rollout.base import SamplingParams


def logits_warpers(params: SamplingParams):
    """The ``LogitsProcessorList`` that ``generate`` builds for these sampling settings (greedy: empty)."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList()
    if params.temperature == 0:
        return warpers
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k:
        warpers.append(TopKLogitsWarper(top_k=params.top_k))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=params.top_p))
    return warpers


def supports_prompt_sharing(model) -> bool:
    """Whether ``model`` is a text decoder whose cache can be expanded and cut by rows: a transformers model
    that uses a ``DynamicCache`` (a vision-language model computes its own M-RoPE positions from the whole
    sequence, so it keeps the plain ``generate`` path)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "generate") or getattr(config, "is_encoder_decoder", False):
        return False
    if hasattr(config, "vision_config"):
        return False
    import inspect

    params = inspect.signature(model.forward).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return {"past_key_values", "position_ids", "logits_to_keep"} <= set(params)


def stop_criteria(tokenizer, stop) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``completions [A, t] -> [A] bool`` (a row has just completed one of ``stop``), or None without stop
    strings. Stop strings are matched over the completion's tokens only, here and in the shared finishing
    rule (``finishing.cut_at_stop_strings``). ``generate``'s ``StopStringCriteria`` reads the whole sequence,
    so a stop string that begins inside the prompt and ends in the completion stops generate but not this
    sampler; every stop string wholly inside the completion stops both at the same token."""
    if not stop:
        return None
    from transformers import StopStringCriteria

    criteria = StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop))
    return lambda ids: criteria(ids, None).to(ids.device)


def supports_vision_prompt_sharing(model) -> bool:
    """Whether ``model`` is a vision-language model whose M-RoPE positions this sampler can continue: its base
    model computes them with ``get_rope_index`` (Qwen2-VL, Qwen2.5-VL)."""
    base = getattr(model, "model", None)
    return hasattr(getattr(model, "config", None), "vision_config") and callable(getattr(base, "get_rope_index", None))


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from a left-padded attention mask, as ``generate`` computes them."""
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


@torch.no_grad()
def prompt_shared_sample(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, params: SamplingParams,
                         eos_token_id: int | None, pad_token_id: int,
                         stop: Callable[[torch.Tensor], torch.Tensor] | None = None,
                         on_step: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], None] | None = None,
                         model_inputs: dict[str, torch.Tensor] | None = None, suppress: list[int] | None = None,
                         ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Sample ``params.n`` completions of each of the B left-padded prompts ``input_ids`` [B, P].

    ``stop(completions [A, t]) -> [A] bool``: whether each active row has just completed a stop string.
    ``on_step(rows [A], tokens [A], raw_logits [A, V], t)``: called once per decode step with the raw
    (unprocessed, float32) logits that predicted the sampled tokens of the rows still active.
    ``model_inputs``: a vision-language prompt's pixel inputs (module docstring); ``suppress``: token ids
    never sampled.

    Returns ``completion_ids`` [B * n, C] (C: the longest row; prompt-major, padded with ``pad_token_id``),
    ``lengths`` [B * n] (tokens sampled per row, EOS and stop string included) and timings ``{"prefill_s",
    "decode_s", "row_steps"}`` (``row_steps``: rows decoded summed over steps, the decode work done).
    """
    import time

    from transformers import DynamicCache

    n, device = params.n, input_ids.device
    warpers = logits_warpers(params)
    greedy = params.temperature == 0
    t0 = time.perf_counter()
    cache = DynamicCache(config=model.config)
    positions = _positions(attention_mask)
    prefill_positions, delta = positions, None
    vision = {k: v for k, v in (model_inputs or {}).items() if v is not None}
    if "pixel_values" in vision:  # M-RoPE: the model's own positions, and where text goes on from there
        prefill_positions, delta = model.model.get_rope_index(
            input_ids, mm_token_type_ids=vision["mm_token_type_ids"], image_grid_thw=vision["image_grid_thw"],
            attention_mask=attention_mask)
        delta = delta.reshape(-1).repeat_interleave(n, dim=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=prefill_positions,
                past_key_values=cache, use_cache=True, logits_to_keep=1, **vision)
    cache = out.past_key_values
    logits = out.logits[:, -1].to(dtype=torch.float32).repeat_interleave(n, dim=0)
    del out
    if n > 1:
        cache.batch_repeat_interleave(n)
    mask = attention_mask.repeat_interleave(n, dim=0)
    last_pos = positions[:, -1].repeat_interleave(n, dim=0)
    prefill_s = time.perf_counter() - t0

    R, C = input_ids.shape[0] * n, params.max_new_tokens
    completion = torch.full((R, C), pad_token_id, dtype=torch.long, device=device)
    lengths = torch.zeros(R, dtype=torch.long, device=device)
    rows = torch.arange(R, device=device)
    row_steps = 0
    t1 = time.perf_counter()
    suppressed = torch.tensor(sorted(set(suppress or ())), dtype=torch.long, device=device)
    for t in range(C):
        if suppressed.numel():
            logits_in = logits.clone()
            logits_in[:, suppressed] = float("-inf")
        else:
            logits_in = logits
        scores = warpers(completion[rows, :t], logits_in)
        if greedy:
            tokens = scores.argmax(-1)
        else:
            tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        completion[rows, t] = tokens
        lengths[rows] += 1
        row_steps += rows.numel()
        if on_step is not None:
            on_step(rows, tokens, logits, t)
        done = tokens == eos_token_id if eos_token_id is not None else torch.zeros_like(tokens, dtype=torch.bool)
        if stop is not None:
            done |= stop(completion[rows, : t + 1])
        if t == C - 1 or bool(done.all()):
            break
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            rows, tokens, mask, last_pos = rows[keep], tokens[keep], mask[keep], last_pos[keep]
            if delta is not None:
                delta = delta[keep]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        last_pos = last_pos + 1
        step_pos = last_pos if delta is None else last_pos + delta
        out = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=step_pos[:, None],
                    past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[:, -1].to(dtype=torch.float32)
        del out
    completion = completion[:, : int(lengths.max())]
    return completion, lengths, {"prefill_s": prefill_s, "decode_s": time.perf_counter() - t1,
                                 "row_steps": row_steps}

"""Sampling prompts that show images, with the per-token signals recorded while sampling.

A question with images reaches an engine as a ``rollout.requests.SamplingRequest``: the prompt text (after the
chat template, which holds one image placeholder per image) and its image paths, a named field. Its model inputs are the processor's (:func:`image_inputs`): ``input_ids`` with the image
placeholders expanded to one token per merged patch, ``pixel_values``, ``image_grid_thw`` and
``mm_token_type_ids``.

:func:`sample_sequences` samples ``n`` completions of one prompt with ``model.generate`` (the model expands
the pixel inputs per sample), with the signals recorded by ``integrations.StepLogitsSignalRecorder``: per
step, the LM head's output reduced at once to lse, entropy and self-certainty, and (with images) the
``ttrl_mass`` attention function's image / prompt / generated key mass of the query that produces each token:
VisConf sec. 3.1's visual engagement ``v_t = A_I / (A_I + A_P + A_G)``, never an eager ``[H, T, T]`` map,
never ``[R, C, V]`` logits. The signals are under the raw logits (temperature 1), whatever the sampling
temperature, and equal a teacher-forced replay with ``integrations.score_rollouts`` (tested).
:func:`sample_each_prompt` is the HF engine's path for image prompts (and, with ``per_prompt_generate``, for
every prompt): one ``generate`` call per prompt
(with signals: ``generate``, each image encoded once per sample; without: prompt-shared sampling, each image
encoded once per question), the rows
finished by the engines' shared rules (``finishing.finish_rollouts``) and each row's images kept on
``Rollouts.images`` for the training pass. ``ttrl generate`` samples its questions through the same engine,
so a pool's ``visual_engagement`` is the one a TTRL labeler reads.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Sequence

import torch

from ttrl_lightning.integrations import RolloutSignals, StepLogitsSignalRecorder
from ttrl_lightning.integrations.groups import image_token_ids
from ttrl_lightning.models import VisionBlock
from ttrl_lightning.rollout.base import (Rollouts, SamplingParams, check_context, check_context_chars, context_length,
                                         plain_generation_config)
from ttrl_lightning.rollout.finishing import finish_rollouts
from ttrl_lightning.rollout.requests import SamplingRequest, as_requests, refuse_images_without_processor
from ttrl_lightning.rollout.shared_prefill import prompt_shared_sample, stop_criteria, supports_vision_prompt_sharing
from ttrl_lightning.rollout.signal_recording import mask_signals

__all__ = ["image_inputs", "image_rollouts", "load_images", "sample_sequences",
           "sample_each_prompt", "prompt_inputs", "has_images"]

#: the signals recorded while sampling an image prompt (the text signals, then the visual ones)
IMAGE_SIGNALS = ("logprob", "entropy", "self_certainty", "image_attention", "visual_engagement")


def has_images(requests: Sequence) -> bool:
    """Whether any of ``requests`` (``SamplingRequest`` s or plain strings) shows an image."""
    return any(isinstance(r, SamplingRequest) and r.images for r in requests)


def load_images(paths: Sequence[str]) -> list:
    """The images at ``paths`` as RGB PIL images, in order (the files were verified when the questions were
    read, ``data.questions``)."""
    from PIL import Image

    out = []
    for path in paths:
        with Image.open(path) as img:
            out.append(img.convert("RGB"))
    return out


def image_inputs(processor, text: str, images: Sequence[str]) -> dict[str, torch.Tensor]:
    """The model inputs of one prompt ``text`` (its image placeholders already in it) showing ``images``
    (paths): the processor's ``input_ids [1, T0]``, ``attention_mask``, ``pixel_values``, ``image_grid_thw``
    and ``mm_token_type_ids`` where it gives them; a text prompt's ids and mask alone."""
    pil = [load_images(images)] if images else None
    enc = processor(text=[text], images=pil, return_tensors="pt", padding=True)
    return {k: v for k, v in dict(enc).items() if hasattr(v, "shape")}


def vision_blocks(processor, inputs: dict[str, torch.Tensor]) -> list[VisionBlock]:
    """The :class:`~ttrl_lightning.models.VisionBlock` of every image of one prompt's ``inputs``
    (:func:`image_inputs`): its rows of ``pixel_values`` (``prod(grid_thw)`` patches each), its
    ``image_grid_thw`` row and its tokens (vision start, one placeholder per merged patch, vision end)."""
    if "pixel_values" not in inputs:
        return []
    tok = processor.tokenizer
    token_id = tok.convert_tokens_to_ids(processor.image_token)
    start, end = (tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    merge = int(getattr(processor.image_processor, "merge_size", 2))
    grids = inputs["image_grid_thw"]
    sizes = grids.prod(-1).tolist()
    pixels = torch.split(inputs["pixel_values"], sizes)
    return [VisionBlock((start, *([token_id] * (int(s) // merge ** 2)), end), px, grid[None], token_id)
            for px, grid, s in zip(pixels, grids, sizes)]


def astuple_shallow(record) -> tuple:
    """A dataclass's field values in order, not copied (``dataclasses.astuple`` deep-copies tensors)."""
    return tuple(getattr(record, f.name) for f in fields(record))


def sample_sequences(model, tokenizer, inputs: dict, params: SamplingParams, seed: int | None = None,
                     record_signals: bool = True):
    """``params.n`` samples of one prompt: ``(sequences [n, T0 + C], RolloutSignals over the C generated
    tokens, or None without record_signals)`` (``integrations.StepLogitsSignalRecorder``; the attention mass
    only when ``inputs`` has images). ``seed``: sample in a forked RNG seeded with it (None: the RNG as it
    is). ``params.stop`` ends a row at a stop string, as the text engine's ``generate`` does.

    The image / video placeholder tokens of a vision-language model are never sampled (``suppress_tokens``):
    at such a position the model and a replay would expect image features. The signals still come from the
    full, unfiltered distribution."""
    greedy = params.temperature == 0
    if greedy and params.n > 1:  # generate refuses greedy n > 1: one greedy sample, repeated n times
        sequences, sig = sample_sequences(model, tokenizer, inputs, replace(params, n=1), seed, record_signals)
        if sig is not None:
            sig = RolloutSignals(*(None if v is None else v.repeat_interleave(params.n, 0) for v in astuple_shallow(sig)))
        return sequences.repeat_interleave(params.n, 0), sig
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    kwargs = dict(max_new_tokens=params.max_new_tokens, do_sample=not greedy, num_return_sequences=params.n,
                  use_cache=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    if not greedy:
        kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
    if params.stop:
        kwargs.update(stop_strings=list(params.stop), tokenizer=tokenizer)
    placeholders = image_token_ids(model.config)
    if placeholders:  # a sampled image placeholder would be read as an image (by the model and the replay)
        kwargs["suppress_tokens"] = placeholders
    recorder = None
    if record_signals:
        recorder = StepLogitsSignalRecorder(model, inputs["input_ids"], inputs.get("attention_mask"),
                                            inputs.get("mm_token_type_ids"), temperature=1.0,
                                            record_attention="pixel_values" in inputs, tokenizer=tokenizer)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], enabled=seed is not None), \
            torch.no_grad():
        if seed is not None:
            torch.manual_seed(seed)
        if recorder is None:
            with plain_generation_config(model):
                return model.generate(**inputs, **kwargs), None
        with recorder, plain_generation_config(model):
            sequences = model.generate(**inputs, **kwargs)
    return sequences, recorder.signals(sequences)


def shared_completions(model, tokenizer, inputs: dict[str, torch.Tensor], params: SamplingParams) -> torch.Tensor:
    """``params.n`` completions [n, C] of one prompt by prompt-shared sampling (``shared_prefill``): its
    image encoded and its prompt prefilled once; rows padded with the pad token after they finish."""
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    vision = {k: inputs[k] for k in ("pixel_values", "image_grid_thw", "mm_token_type_ids") if k in inputs}
    comp, _, _ = prompt_shared_sample(model, inputs["input_ids"], inputs["attention_mask"], params,
                                      tokenizer.eos_token_id, tokenizer.pad_token_id,
                                      stop=stop_criteria(tokenizer, params.stop), model_inputs=vision,
                                      suppress=image_token_ids(model.config))
    return comp


def image_rollouts(tokenizer, parts: Sequence[tuple], params: SamplingParams, device,
                   lengths: torch.Tensor | None = None) -> Rollouts:
    """The ``Rollouts`` of sampled image prompts, prompt-major: ``parts`` holds per prompt ``(input_ids [T0]``
    (the processor's, image placeholders expanded), ``completions [n, C_i]`` (padded with the pad token
    after a row ends), ``vision blocks)``. The prompts are left-padded and the completions right-padded to
    the batch's longest, finished by the engines' shared rules (``finish_rollouts``: EOS, stop strings), each
    row's images on ``Rollouts.images`` for the training pass. ``lengths`` [R]: how many tokens of each row
    were sampled (None: each prompt's ``C_i``)."""
    n = params.n
    P = max(ids.numel() for ids, _, _ in parts)
    C = max(max(comp.shape[1] for _, comp, _ in parts), 1)
    pad = tokenizer.pad_token_id
    prompt_ids = torch.full((len(parts) * n, P), pad, dtype=torch.long)
    prompt_mask = torch.zeros((len(parts) * n, P), dtype=torch.long)
    completion = torch.full((len(parts) * n, C), pad, dtype=torch.long)
    widths = torch.zeros(len(parts) * n, dtype=torch.long)  # each prompt's C_i
    for i, (ids, comp, _) in enumerate(parts):
        rows = slice(i * n, (i + 1) * n)
        prompt_ids[rows, P - ids.numel():] = ids
        prompt_mask[rows, P - ids.numel():] = 1
        completion[rows, :comp.shape[1]] = comp
        widths[rows] = comp.shape[1]
    lengths = widths if lengths is None else lengths
    rollouts = finish_rollouts(tokenizer, prompt_ids.to(device), prompt_mask.to(device), completion.to(device),
                               params, lengths=lengths.to(device))
    rollouts.images = [blocks for _, _, blocks in parts for _ in range(n)]
    return rollouts


def prompt_inputs(tokenizer, processor, request: SamplingRequest) -> dict[str, torch.Tensor]:
    """The model inputs of one request: the processor's (:func:`image_inputs`) for a vision-language model,
    the tokenizer's ``input_ids [1, T0]`` and ``attention_mask`` (no special tokens added: the text is
    templated already) for a text-only one, which an image is refused for."""
    if processor is not None:
        return image_inputs(processor, request.text, request.images)
    if request.images:
        refuse_images_without_processor(processor)
    enc = tokenizer([request.text], return_tensors="pt", add_special_tokens=False)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def sample_each_prompt(model, tokenizer, processor, requests: Sequence[SamplingRequest], params: SamplingParams,
                       record_signals: bool, share_prompt: bool = True) -> Rollouts:
    """The ``Rollouts`` of ``requests`` (with or without images), ``params.n`` rows per prompt, prompt-major:
    one :func:`sample_sequences` call per prompt in the caller's RNG (the engine's ``sampling_mode``), the
    prompts left-padded and the completions right-padded to the batch's longest, finished by
    ``finish_rollouts`` (EOS, stop strings), each row's images on ``Rollouts.images``. ``record_signals``:
    ``logprob``, ``entropy``, ``self_certainty`` and, when a prompt shows an image, ``image_attention`` and
    ``visual_engagement`` ([R, C] float32; NaN outside the completion and on the rows of a prompt without an
    image). ``share_prompt`` (used when no signals are recorded and the model supports it,
    ``shared_prefill.supports_vision_prompt_sharing``): each prompt prefilled once with its pixels and its
    cache repeated n ways (``shared_prefill.prompt_shared_sample``), the same tokens as ``generate`` up to
    the first finished row; the signal recorder follows ``generate``'s rows, so recording keeps ``generate``.
    The model inputs are :func:`prompt_inputs`' (a text-only model's tokenizer, which an image is refused
    for)."""
    n = params.n
    device = next(model.parameters()).device
    limit = context_length(model)
    shared = share_prompt and not record_signals and supports_vision_prompt_sharing(model)
    parts = []
    requests = as_requests(requests)
    check_context_chars([r.text for r in requests], params.max_new_tokens, limit, tokenizer,
                        "the model's context (max_position_embeddings)")
    for i, request in enumerate(requests):
        inputs = prompt_inputs(tokenizer, processor, request)
        check_context([int(inputs["input_ids"].shape[1])], params.max_new_tokens, limit,
                      "the model's context (max_position_embeddings)", prompts=[request.text],
                      names=None if request.question_id is None else [request.question_id])
        t0 = inputs["input_ids"].shape[1]
        if shared:
            comp, sig = shared_completions(model, tokenizer, inputs, params), None
        else:
            sequences, sig = sample_sequences(model, tokenizer, inputs, params, record_signals=record_signals)
            comp = sequences[:, t0:]
        blocks = vision_blocks(processor, inputs) if processor is not None else []
        parts.append((inputs["input_ids"][0].cpu(), comp.cpu(), sig, blocks))
    rollouts = image_rollouts(tokenizer, [(ids, comp, blocks) for ids, comp, _, blocks in parts], params, device)
    if not any(rollouts.images):  # text prompts only: no pixel inputs for the training pass
        rollouts.images = []
    C = rollouts.completion_ids.shape[1]
    if record_signals:
        names = [s for s in IMAGE_SIGNALS if any(getattr(sig, s) is not None for _, _, sig, _ in parts)]
        signals = {s: torch.full((len(parts) * n, C), float("nan"), device=device) for s in names}
        for i, (_, comp, sig, _) in enumerate(parts):
            for s in names:
                value = getattr(sig, s)
                if value is not None:
                    signals[s][i * n:(i + 1) * n, :comp.shape[1]] = value.float().to(device)
        rollouts.signals = mask_signals(signals, rollouts.completion_mask)
    return rollouts

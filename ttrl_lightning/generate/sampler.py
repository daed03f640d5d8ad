"""Sample the rollouts of one view of a question, with the per-token signals recorded while sampling.

``sample_view``: one ``generate`` call per (question, view): the prompt repeated ``n`` times (``num_return_sequences``),
under ``torch.manual_seed(seed)`` in a forked RNG, so the rollouts of a question depend on the model, the
settings and its seed only -- not on which other questions run, in which order, on which rank, or whether
the run was resumed. The signals come from ``integrations.GenerationSignalRecorder``
(``generate_with_signals``' hook), here ``integrations.StepLogitsSignalRecorder`` through
``rollout.image_sampling.sample_sequences`` (the HF engine's path for image prompts too): the LM head's output
of each step reduced at once to lse, entropy and self-certainty and, for a vision-language model, the
``ttrl_mass`` attention function (no eager attention, no ``output_attentions``, no logits kept), under the
raw logits (temperature 1: VisConf sec. 3.1's ``p_t`` "obtained by applying softmax directly to the unscaled model
logits") whatever the sampling temperature. They equal a teacher-forced replay with
``integrations.score_rollouts`` (tested).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch

from ..data.pool import TOKEN_FIELDS
from ..rollout.base import Rollouts, SamplingParams
from ..rollout.image_sampling import sample_sequences
from ..rollout.records import records_from_rollouts

__all__ = ["sample_sequences", "sample_view", "sample_batch"]


def sample_view(model, tokenizer, inputs: dict, view: str, params: SamplingParams, seed: int,
                extract: Callable[[str, object], str] | None = None, choices=None) -> tuple[list[dict], int]:
    """``params.n`` rollouts of one prompt as pool rollouts, and the number of tokens generated.

    inputs: the prompt batch of one question ([1, T0] and its image tensors; :class:`.prompts.PromptBuilder`);
    view: the pool view of the rollouts; seed: the sampling seed of this (question, view); extract: the answer
    extractor ``(text, choices) -> answer`` written into each rollout's ``answer`` (None: left null, read
    when the pool is loaded). The rollouts are ``rollout.records_from_rollouts``' (validated): ``text``,
    ``view``, ``num_tokens`` and the per-token ``logprob``, ``entropy``, ``self_certainty`` and, when the
    prompt has image tokens, ``visual_engagement`` and ``image_attention`` over the completion tokens
    (end-of-sequence included).
    """
    sequences, sig = sample_sequences(model, tokenizer, inputs, params, seed)
    prompt_ids = inputs["input_ids"].cpu()
    n, t0 = sequences.shape[0], prompt_ids.shape[1]
    completion = sequences[:, t0:].cpu()
    mask = sig.completion_mask.cpu()
    texts = [tokenizer.decode(completion[r, :int(mask[r].sum())].tolist(), skip_special_tokens=True)
             for r in range(n)]
    signals = {name: getattr(sig, name).cpu() for name in TOKEN_FIELDS if getattr(sig, name) is not None}
    prompt_mask = inputs.get("attention_mask", torch.ones_like(prompt_ids)).cpu()
    rollouts = Rollouts(prompt_ids=prompt_ids.expand(n, -1), prompt_mask=prompt_mask.expand(n, -1),
                        completion_ids=completion, completion_mask=mask.long(), texts=texts,
                        group=torch.zeros(n, dtype=torch.long), n=n, signals=signals)
    (record,) = records_from_rollouts(rollouts, ["question"], choices=[choices], views=[view])
    if extract is not None:
        for ro in record["rollouts"]:
            ro["answer"] = extract(ro["text"], choices)
    return record["rollouts"], int(mask.sum())


def sample_batch(engine, model, prompts: list, questions: list[dict], views: list[str], params: SamplingParams,
                 seed: int, extract: Callable[[str, object], str] | None = None) -> tuple[list[dict], int]:
    """The pool records of several questions from ONE ``engine.generate`` call, and the tokens generated.

    prompts: the request of every (question, view), question-major (``PromptBuilder.request``); questions:
    the questions of the batch, in order; views: the views of each question's prompts. The engine records the
    per-token signals (``record_signals=True``: the HF engine's or vLLM's replay through the fused op; vLLM's
    ``logprob`` is its sampler's). The rollouts of a question depend on the batch it is in and ``seed``
    (``ttrl generate`` forms its batches from fixed positions of the question list, so a re-run or a resume
    gives the same ones)."""
    if len(prompts) != len(questions) * len(views):
        raise ValueError(f"{len(prompts)} prompts for {len(questions)} questions x {len(views)} views")
    rollouts = engine.generate(model, prompts, replace(params, seed=seed))
    ids = [q["id"] for q in questions for _ in views]
    records = records_from_rollouts(rollouts, ids, golds=[q["gold"] for q in questions for _ in views],
                                    choices=[q["choices"] for q in questions for _ in views],
                                    views=list(views) * len(questions))
    if extract is not None:
        for rec in records:
            for ro in rec["rollouts"]:
                ro["answer"] = extract(ro["text"], rec["choices"])
    return records, rollouts.num_completion_tokens

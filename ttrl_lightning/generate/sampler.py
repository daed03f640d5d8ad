"""The pool records of questions sampled by a rollout engine, with the per-token signals recorded while sampling.

``sample_batch``: one ``engine.generate`` call for the requests of several questions (or, at ``ttrl generate
--batch-size 1``, of one (question, view) with its own seed, on the HF engine built with
``per_prompt_generate``: one ``generate`` call, the prompt repeated ``n`` times by ``num_return_sequences``,
so the rollouts of a question depend on the model, the settings and its seed only -- not on which other
questions run, in which order, on which rank, or whether the run was resumed). There the signals come from
``integrations.StepLogitsSignalRecorder`` through ``rollout.image_sampling.sample_sequences``: the LM head's
output of each step reduced at once to lse, entropy and self-certainty and, for a vision-language model, the
``ttrl_mass`` attention function (no eager attention, no ``output_attentions``, no logits kept), under the
raw logits (temperature 1: VisConf sec. 3.1's ``p_t`` "obtained by applying softmax directly to the unscaled model
logits") whatever the sampling temperature. They equal a teacher-forced replay with
``integrations.score_rollouts`` (tested).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..rollout.base import SamplingParams
from ..rollout.image_sampling import sample_sequences
from ..rollout.records import records_from_rollouts

__all__ = ["sample_sequences", "sample_batch"]


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

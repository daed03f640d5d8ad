"""The evaluation of a study's start and runs: k samples per question at fixed sampling, one evaluation seed per
run seed, and the per-question counts kept (what the report's paired intervals are computed from).

The sampling follows the TTRL config unless the spec sets it: ``evaluation.temperature`` / ``top_p`` default to
the config's ``eval`` section (``modules.ttrl.specs.EvalSpec``), ``max_new_tokens`` to its ``sampling``; the
answer extractor and the prompt rule (``prompt_format``: a chat model's template) are the config's, so the start
and every run are read exactly as training reads them.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from .runs import nested
from .spec import EvaluationSpec

__all__ = ["EvalSettings", "eval_settings", "evaluate_split", "load_for_evaluation"]


@dataclass(frozen=True)
class EvalSettings:
    k: int
    temperature: float
    top_p: float
    max_new_tokens: int
    extractor: str
    prompt_format: str
    batch_size: int


def eval_settings(spec: EvaluationSpec, config: Mapping) -> EvalSettings:
    """The evaluation's sampling: the spec's values, else the composed TTRL ``config``'s, else the module's
    defaults."""
    from ..modules.specs import SamplingSpec
    from ..modules.ttrl.specs import EvalSpec, VotingSpec

    h = nested(config, "model", "init_args", default={}) or {}

    def pick(given, *path, default):
        value = nested(h, *path)
        return given if given is not None else (default if value is None else value)

    return EvalSettings(
        k=spec.k, temperature=float(pick(spec.temperature, "eval", "temperature", default=EvalSpec.temperature)),
        top_p=float(pick(spec.top_p, "eval", "top_p", default=EvalSpec.top_p)),
        max_new_tokens=int(pick(spec.max_new_tokens, "sampling", "max_new_tokens",
                                default=SamplingSpec.max_new_tokens)),
        extractor=str(pick(None, "voting", "answer_extractor", default=VotingSpec.answer_extractor)),
        prompt_format=str(h.get("prompt_format") or "auto"), batch_size=spec.batch_size)


def evaluate_split(model, tokenizer, processor, path: str, settings: EvalSettings, seed: int) -> dict:
    """avg@k / maj@k / pass@k of ``model`` on the question file ``path`` and the per-question counts:
    ``correct[q]`` (of k samples) and ``majority_correct[q]`` (0/1), in the file's order."""
    from ..answers import ANSWER_EXTRACTORS
    from ..data.questions import read_questions
    from ..eval.sampled import evaluate_sampled
    from ..rollout import SamplingParams
    from ..rollout.requests import PromptRenderer

    t0 = time.perf_counter()
    questions = read_questions(path)
    params = SamplingParams(n=settings.k, temperature=settings.temperature, top_p=settings.top_p,
                            max_new_tokens=settings.max_new_tokens, seed=seed)
    metrics, _ = evaluate_sampled(model.eval(), tokenizer, questions, settings.k, params,
                                  batch_size=settings.batch_size, progress=True,
                                  extract=ANSWER_EXTRACTORS[settings.extractor], processor=processor,
                                  renderer=PromptRenderer(tokenizer, processor, settings.prompt_format, source=path))
    return {"k": settings.k, "seed": seed, "avg": metrics.avg_at_k, "maj": metrics.maj_at_k,
            "pass": metrics.pass_at_k, "correct": [int(p["correct"]) for p in metrics.per_question],
            "majority_correct": [int(bool(p["majority_correct"])) for p in metrics.per_question],
            "seconds": round(time.perf_counter() - t0, 1)}


def load_for_evaluation(checkpoint: str):
    """``(model, tokenizer, processor)`` of the checkpoint at ``checkpoint``, loaded once for every evaluation
    seed of a start (:func:`evaluate_split`)."""
    from ..models import load_model, load_processor, load_tokenizer

    tokenizer = load_tokenizer(checkpoint)
    return load_model(checkpoint, tokenizer), tokenizer, load_processor(checkpoint)

"""Sampled-completion accuracy: ``avg@k``, ``maj@k`` and ``pass@k`` of k completions per question.

For question ``q`` with gold answer ``g_q`` and k sampled completions whose extracted answers
(``answers.extract_answer(text, choices)``) are ``a_q1 .. a_qk``, and ``c_qj = 1[a_qj ~ g_q]`` (``~``: the
answer's equivalence class (``answers.canonical_answer_classes``) has a representative equal to the gold
(``answers.answers_equal``); an unextractable answer, ``NO_ANSWER``, is never correct):

* ``avg@k  = mean_q (1/k) sum_j c_qj`` -- the expected accuracy of ONE sample (TTRL reports it as
  "avg@16" / "mean@16" at temperature 0.6, top-p 0.95);
* ``maj@k  = mean_q 1[maj_q ~ g_q]`` where ``maj_q`` is the majority vote over the k answers
  (``consensus.aggregate(..., "majority")``: ties go to the answer whose first sample comes first;
  unextractable answers vote together as ``NO_ANSWER``, and a ``NO_ANSWER`` majority is wrong);
* ``pass@k = mean_q max_j c_qj`` -- at least one of the k samples is correct (an oracle's number: it is not
  the accuracy of anything a user gets without the gold answer; TTRL's logged ``pass@64`` is this with k=64).

:func:`sampled_metrics` computes them from texts, :func:`evaluate_sampled` samples the texts with a rollout
engine first (``ttrl eval`` on the command line).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from ttrl_lightning.answers import NO_ANSWER, answers_equal, canonical_answer_classes, extract_answer
from ttrl_lightning.consensus import aggregate
from ttrl_lightning.errors import UserError
from ttrl_lightning.seeding import derive_seed

__all__ = ["SampledMetrics", "sampled_metrics", "evaluate_sampled", "question_outcome"]


@dataclass
class SampledMetrics:
    """avg@k, maj@k and pass@k over ``num_questions`` questions (fractions in [0, 1]; module docstring).

    ``per_question``: one dict per question, in input order: ``id``, ``gold``, ``correct`` (how many of the
    k samples are correct), ``majority`` (the majority answer, ``NO_ANSWER`` when unextractable answers win),
    ``majority_correct``, ``majority_votes`` (the samples in the majority's class), ``answers`` (the k
    extracted answers)."""

    k: int
    num_questions: int
    avg_at_k: float
    maj_at_k: float
    pass_at_k: float
    per_question: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def reward_accuracy(self) -> float | None:
        """Majority TTRL's reward accuracy before any training (TTRL's working condition: the TTRL authors
        report it above 0.8 in all their runs): over the k samples of every question whose majority is an
        answer, the share whose pseudo-reward ``1[a ~ majority]`` equals the gold reward ``1[a ~ gold]``. Where
        the majority is right the two agree on every sample; where it is wrong they disagree on the majority's
        votes and on the right ones: ``1 - (majority_votes + correct) / k``. Questions whose unextractable
        answers win abstain (as the ``majority`` labeler does); None when every question abstains."""
        kept = [p for p in self.per_question if p["majority"] != NO_ANSWER]
        if not kept:
            return None
        wrong = sum(0 if p["majority_correct"] else p["majority_votes"] + p["correct"] for p in kept)
        return 1 - wrong / (self.k * len(kept))

    def as_dict(self) -> dict[str, float | int]:
        """``{"k", "num_questions", "avg@k", "maj@k", "pass@k"}`` with k written out (``"avg@16"``)."""
        k = self.k
        return {"k": k, "num_questions": self.num_questions, f"avg@{k}": self.avg_at_k,
                f"maj@{k}": self.maj_at_k, f"pass@{k}": self.pass_at_k}


def question_outcome(answers: Sequence[str], gold: str) -> tuple[int, str, bool, int]:
    """One question's ``(number of correct answers, majority answer, majority is correct, votes of the
    majority's class)``.

    ``answers`` are extracted answers (``NO_ANSWER`` for unextractable ones). They are grouped into
    equivalence classes; a class is correct when its representative equals ``gold``; the majority vote runs
    on the class representatives (``consensus.aggregate``'s tie rule)."""
    class_of, reps = canonical_answer_classes(list(answers))
    correct = [rep != NO_ANSWER and answers_equal(rep, gold) for rep in reps]
    decision = aggregate([reps[c] for c in class_of], "majority")
    majority = decision.answer
    winner = reps.index(majority)
    return sum(correct[c] for c in class_of), majority, correct[winner], sum(c == winner for c in class_of)


def sampled_metrics(texts: Sequence[Sequence[str]], golds: Sequence[str | None],
                    choices: Sequence[Mapping[str, str] | None] | None = None,
                    ids: Sequence[str] | None = None, *,
                    extract: Callable[[str, Any], str] = extract_answer) -> SampledMetrics:
    """avg@k, maj@k, pass@k of ``texts`` ``[Q][k]`` (completions) against ``golds`` ``[Q]``.

    ``choices``: per question, the options of a multiple-choice question (None: open); ``ids``: names of
    the questions (default: their index) in messages and ``per_question``; ``extract``: the answer
    extractor ``(text, choices) -> answer`` (default :func:`~ttrl_lightning.answers.extract_answer`).
    Raises ``ValueError`` naming the question when the inputs disagree in length, a question has no gold,
    or the questions do not all have the same k >= 1.
    """
    q = len(texts)
    if q == 0:
        raise ValueError("no questions")
    if isinstance(texts, str):
        raise ValueError("texts must be one list of completions per question, got a string")
    ids = [str(i) for i in range(q)] if ids is None else [str(i) for i in ids]
    for name, seq in (("golds", golds), ("choices", choices), ("ids", ids)):
        if seq is not None and len(seq) != q:
            raise ValueError(f"{name} has {len(seq)} entries for {q} questions")
    choices = [None] * q if choices is None else list(choices)
    k = None
    per_question = []
    for i in range(q):
        row, gold = texts[i], golds[i]
        if isinstance(row, str) or not isinstance(row, Sequence):
            raise ValueError(f"question {ids[i]!r}: expected a list of completions, got {type(row).__name__}")
        if k is None:
            k = len(row)
            if k < 1:
                raise ValueError(f"question {ids[i]!r} has no completions (k must be >= 1)")
        elif len(row) != k:
            raise ValueError(f"question {ids[i]!r} has {len(row)} completions but question {ids[0]!r} has "
                             f"{k}; every question needs the same k")
        if gold is None:
            raise ValueError(f"question {ids[i]!r} has no gold answer")
        if not isinstance(gold, str):
            raise ValueError(f"question {ids[i]!r}: gold must be a string, got {type(gold).__name__}")
        answers = [extract(t, choices[i]) for t in row]
        n_correct, majority, majority_correct, majority_votes = question_outcome(answers, gold)
        per_question.append({"id": ids[i], "gold": gold, "correct": n_correct, "majority": majority,
                             "majority_correct": majority_correct, "majority_votes": majority_votes,
                             "answers": answers})
    return SampledMetrics(
        k=k, num_questions=q,
        avg_at_k=sum(p["correct"] / k for p in per_question) / q,
        maj_at_k=sum(p["majority_correct"] for p in per_question) / q,
        pass_at_k=sum(p["correct"] > 0 for p in per_question) / q,
        per_question=per_question)


def evaluate_sampled(model, tokenizer, questions: list[dict], k: int, params, batch_size: int = 16,
                     engine=None, progress: bool = False, *,
                     extract: Callable[[str, Any], str] = extract_answer, processor=None, renderer=None
                     ) -> tuple[SampledMetrics, list[list[str]]]:
    """Sample ``k`` completions of every question with ``engine`` and score them (:func:`sampled_metrics`).

    Args:
        model, tokenizer: the policy (a transformers causal LM) and its tokenizer.
        questions: dicts with ``id``, ``prompt``, ``gold`` and optional ``choices`` / ``images``
            (:func:`~ttrl_lightning.data.questions.read_questions`); every one needs a gold answer.
        k: samples per question; ``params.n`` is replaced by ``k``.
        params: :class:`~ttrl_lightning.rollout.SamplingParams` (temperature, top-p, top-k, max new
            tokens, stop strings, seed). With a seed, batch ``b`` samples with ``derive_seed(seed,
            "rollout", b)``: the same seed and batch size give the same completions.
        batch_size: questions per ``engine.generate`` call (``batch_size * k`` sequences).
        engine: a rollout engine (default ``HFGenerateEngine(tokenizer, processor=processor)``).
        progress: a tqdm bar over the questions.
        processor: a vision-language model's processor (``models.load_processor``): questions with images
            are sampled with them (``rollout.requests.SamplingRequest.images``).
        renderer: the prompt rule (``rollout.requests.PromptRenderer``), which checks the questions against
            the model and the engine and templates their prompts; default ``PromptRenderer(tokenizer,
            processor)`` (``prompt_format`` ``auto``; a prompt that already holds the template is kept).
    Returns:
        ``(metrics, texts)`` with ``texts[q]`` the k completions of question q.
    Raises:
        UserError naming the questions that have no gold answer, or images for a text-only model (no
        ``processor``) or for an engine that does not take images.
    """
    from ttrl_lightning.data.questions import few_ids
    from ttrl_lightning.rollout import HFGenerateEngine
    from ttrl_lightning.rollout.base import check_context, check_context_chars, context_limit
    from ttrl_lightning.rollout.requests import PromptRenderer, SamplingRequest

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not questions:
        raise ValueError("no questions")
    ungraded = [str(q["id"]) for q in questions if q.get("gold") is None]
    if ungraded:
        raise UserError(f"{len(ungraded)} question(s) have no gold answer, which avg@k / maj@k / pass@k "
                        f"need: {few_ids(ungraded)}")
    engine = HFGenerateEngine(tokenizer, processor=processor) if engine is None else engine
    renderer = PromptRenderer(tokenizer, processor) if renderer is None else renderer
    requests = [SamplingRequest(q["prompt"], tuple(q.get("images") or ()), question_id=str(q["id"]))
                for q in questions]
    renderer.check(requests, engine)
    requests = renderer.render(requests)
    limit = context_limit(engine, model)
    text = [r for r in requests if not r.images]  # an image prompt is checked with its image tokens
    if limit is not None and text:  # every question, before anything is sampled (by characters, then tokens)
        check_context_chars([r.text for r in text], params.max_new_tokens, limit, tokenizer,
                            "the model's context", names=[r.question_id for r in text])
        check_context([len(tokenizer(r.text, add_special_tokens=False)["input_ids"]) for r in text],
                      params.max_new_tokens, limit, "the model's context", names=[r.question_id for r in text])
    params = replace(params, n=k)
    texts: list[list[str]] = []
    from ttrl_lightning.eval.progress_bar import progress_bar

    bar = progress_bar(len(questions), f"sampling k={k}", enabled=progress)
    try:
        for b, start in enumerate(range(0, len(questions), batch_size)):
            chunk = requests[start:start + batch_size]
            seed = None if params.seed is None else derive_seed(params.seed, "rollout", b)
            out = engine.generate(model, chunk, replace(params, seed=seed))
            if len(out.texts) != len(chunk) * k:
                raise RuntimeError(f"the engine returned {len(out.texts)} completions for {len(chunk)} "
                                   f"prompts x {k} samples")
            texts.extend(list(out.texts[i * k:(i + 1) * k]) for i in range(len(chunk)))
            bar.update(len(chunk))
    finally:
        bar.close()
    metrics = sampled_metrics(texts, [q["gold"] for q in questions], [q.get("choices") for q in questions],
                              [q["id"] for q in questions], extract=extract)
    return metrics, texts

"""Vote perturbations for robustness studies of test-time RL (Pixelis sec. 4.3, "adapt safely under unlabeled
shift"): they change a step's sampled votes before the pseudo-labeler sees them.

``VOTE_PERTURBATIONS[name](module, votes, batch, **options) -> Rollouts`` (``TTRLModule(perturbation={"name":
..., <options>})``; none by default). A perturbation is an *adversary*, not the learner: it may read the
batch's gold answers to make sure a flipped answer is wrong, and it is the only code of a TTRL step that reads
gold before the rewards are computed; a run without a perturbation never does.

* ``flip_answers`` (``share=0.25``): in every question's group of votes, ``round(share * M)`` rollouts, drawn
  uniformly per group (``derive_seed(seed, "perturbation", step)``), get their final answer replaced by ONE
  shared wrong answer for that question (``wrong_answer``: the gold number + ``offset``, default 10, for
  numeric golds; otherwise ``"<gold> (flipped)"``); the answer is rewritten where the text states it (the last
  ``\\boxed{..}``, else the last number, else appended), the completion re-tokenised, and every per-token
  signal re-scored by the policy (teacher-forced replay, ``rollout.signals.replay_token_signals``) so the
  flipped rollouts carry the model's own entropy and log-probabilities for the text they now hold.
"""
from __future__ import annotations

import re
from typing import Callable

import torch

from ttrl_lightning.answers.extractors import NUMBER
from ttrl_lightning.registry import Registry
from ttrl_lightning.rollout.base import Rollouts
from ttrl_lightning.seeding import derived_generator

__all__ = ["VOTE_PERTURBATIONS", "flip_answers", "rewrite_answer", "wrong_answer", "retokenize"]

VOTE_PERTURBATIONS: Registry[Callable[..., Rollouts]] = Registry("vote perturbation")

_BOXED = re.compile(r"\\boxed\{[^{}]*\}")


def wrong_answer(gold: str, offset: int = 10) -> str:
    """A wrong answer for ``gold``: ``gold + offset`` for a number, else ``"<gold> (flipped)"``."""
    try:
        value = float(gold)
    except (TypeError, ValueError):
        return f"{gold} (flipped)"
    return str(int(value) + offset) if value.is_integer() else str(value + offset)


def rewrite_answer(text: str, answer: str) -> str:
    """``text`` with its stated final answer replaced by ``answer``: the last ``\\boxed{..}``, else the last
    number, else ``\\boxed{answer}`` appended."""
    boxes = list(_BOXED.finditer(text))
    if boxes:
        m = boxes[-1]
        return text[: m.start()] + "\\boxed{" + answer + "}" + text[m.end():]
    nums = list(NUMBER.finditer(text))
    if nums:
        m = nums[-1]
        return text[: m.start()] + answer + text[m.end():]
    return text + " \\boxed{" + answer + "}"


def retokenize(tokenizer, votes: Rollouts, rows: list[int], texts: list[str]) -> Rollouts:
    """``votes`` with the completions of ``rows`` replaced by ``texts`` (tokenised, EOS appended), right-padded
    to the new width; signals are dropped (re-score them)."""
    comp = [row[: int(m.sum())].tolist() for row, m in zip(votes.completion_ids, votes.completion_mask)]
    new_texts = list(votes.texts)
    for r, t in zip(rows, texts):
        comp[r] = tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        new_texts[r] = t
    width = max(len(c) for c in comp)
    device = votes.completion_ids.device
    ids = torch.full((len(comp), width), tokenizer.pad_token_id, dtype=votes.completion_ids.dtype, device=device)
    mask = torch.zeros(len(comp), width, dtype=votes.completion_mask.dtype, device=device)
    for i, c in enumerate(comp):
        ids[i, : len(c)] = torch.tensor(c, dtype=ids.dtype)
        mask[i, : len(c)] = 1
    return Rollouts(votes.prompt_ids, votes.prompt_mask, ids, mask, new_texts, votes.group, votes.n)


@VOTE_PERTURBATIONS.register("flip_answers")
def flip_answers(module, votes: Rollouts, batch: dict, *, share: float = 0.25, offset: int = 10) -> Rollouts:
    """See the module docstring. ``share`` in [0, 1]; every view's votes of a question are flipped the same way
    (to the same wrong answer)."""
    if not 0 <= share <= 1:
        raise ValueError(f"flip_answers: share must be in [0, 1], got {share}")
    golds = batch.get("gold")
    if golds is None or any(g is None for g in golds):
        raise ValueError("flip_answers needs every question's gold answer (the adversary picks a wrong one)")
    Q, M = len(golds), votes.n
    k = round(share * M)
    if k == 0:
        return votes
    g = derived_generator(module.policy_spec.seed, "perturbation", int(module.global_step))
    rows, texts = [], []
    for p in range(votes.completion_ids.shape[0] // M):
        wrong = wrong_answer(str(golds[p % Q]), offset)
        for j in torch.randperm(M, generator=g)[:k].tolist():
            r = p * M + j
            rows.append(r)
            texts.append(rewrite_answer(votes.texts[r], wrong))
    out = retokenize(module.tokenizer, votes, rows, texts)
    if votes.signals:
        from ttrl_lightning.rollout.signal_recording import replay_token_signals

        replayed = replay_token_signals(module.policy, out, 1.0)
        out.signals = {name: replayed[name] for name in votes.signals}
    return out

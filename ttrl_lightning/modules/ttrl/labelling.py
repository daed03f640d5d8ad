"""TTRL's labelling stage as free functions: one step's votes (an engine's ``Rollouts``) become the
``RolloutRewards`` of the rows trained on, never from gold (the ``gold_reward`` control aside).

``TTRLModule.label_votes`` calls :func:`label_votes` with what the module knows (its ``VotingSpec``, a
``LabellingContext``, the signals it records, its calibration, the step and the advantage's negative shift);
a benchmark or a test calls it with the same values and no module.

* :func:`votes_by_question`: each question's votes as one ``QuestionVotes``: the rows of its prompts (one
  per view: prompt ``v * Q + q`` is question q's view v), in that order, put in question order by one stable
  sort of their prompt index and cut by the questions' row counts; each vote's answer read with the answer
  extractor; the recorded signals on the vote's own tokens (``completion_mask``: an agent's observations
  left out).
* :func:`label_votes`: label every question (``pseudo_label``) and lay the labels' [Q, V * M] rewards and row
  masks out on the rows trained on, the first N of every prompt, in one view/transpose
  (:func:`trained_layout`); an abstained question's prompts are masked (``group_mask``), unless RESTRAIN's
  negative branch (``negative_shift`` > 0) trains a question that failed the gate.
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

import torch

from ttrl_lightning.answers import ANSWER_EXTRACTORS
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.step_records import RolloutRewards, VoteStep
from ttrl_lightning.modules.ttrl.labelers import LabelerSpec, LabellingContext, labeler_spec
from ttrl_lightning.modules.ttrl.specs import VotingSpec, budgeted
from ttrl_lightning.pseudo_labels import pseudo_label
from ttrl_lightning.pseudo_labels.question_votes import QuestionVotes
from ttrl_lightning.rollout.base import Rollouts

__all__ = ["label_votes", "votes_by_question", "vote_views", "vote_signal_names", "trained_layout",
           "question_ids"]


def vote_views(labeler: LabelerSpec, num_questions: int) -> list[str]:
    """The view of every vote prompt: the questions' ("original"), then (a fused labeler) their fused
    Reframe-and-Solve prompts' ("reframed")."""
    return [view for view in labeler.views for _ in range(num_questions)]


def vote_signal_names(labeler: LabelerSpec, signal_names: Sequence[str], votes: Rollouts) -> tuple[str, ...]:
    """The signals the labeler reads on these votes: the recorded ``signal_names``, and the labeler's
    ``image_signals`` when the votes show images (``Rollouts.images``)."""
    images = labeler.image_signals if any(votes.images) else ()
    return tuple(signal_names) + tuple(s for s in images if s not in signal_names)


def votes_by_question(votes: Rollouts, num_questions: int, views: Sequence[str], choices: Sequence,
                      signal_names: Sequence[str], answer_extractor: str) -> list[QuestionVotes]:
    """Each question's votes as one ``QuestionVotes`` (module docstring), with the signals ``signal_names``
    (:func:`vote_signal_names`); a signal the engine did not record is a ``RuntimeError``."""
    missing = [s for s in signal_names if s not in votes.signals]
    if missing:
        raise RuntimeError(f"the rollout engine did not record signal {missing[0]!r}; it recorded "
                           f"{sorted(votes.signals)}")
    extract = ANSWER_EXTRACTORS[answer_extractor]
    Q = num_questions
    prompt_of = votes.group.cpu()
    question_of = prompt_of % Q
    order = torch.argsort(question_of * len(views) + prompt_of, stable=True)
    counts = torch.bincount(question_of, minlength=Q).tolist()
    rows = order.tolist()
    starts = [0, *itertools.accumulate(counts)]
    question_rows = question_of.tolist()
    answers = [extract(votes.texts[r], choices[question_rows[r]]) for r in rows]
    texts = [votes.texts[r] for r in rows]
    view_of = [views[p] for p in prompt_of[order].tolist()]

    def cut(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(t[order.to(t.device)], counts)

    signals = {s: cut(votes.signals[s]) for s in signal_names}
    masks = cut(votes.completion_mask)
    return [QuestionVotes.from_tensors(answers[a:b], texts[a:b], view_of[a:b],
                                       {s: signals[s][q] for s in signal_names}, masks[q])
            for q, (a, b) in enumerate(zip(starts, starts[1:]))]


def trained_layout(per_vote: torch.Tensor, num_views: int, num_votes: int, num_trained: int) -> torch.Tensor:
    """Per-vote values of Q questions, [Q, V * M] (each question's votes, views in order), laid out on the
    rows trained on: [V * Q * N], prompt-major (prompt ``v * Q + q``, its first N votes)."""
    Q = per_vote.shape[0]
    return per_vote.view(Q, num_views, num_votes)[:, :, :num_trained].transpose(0, 1).reshape(-1)


def question_ids(batch: dict[str, list]) -> list[str]:
    """The batch's question ids (``batch["id"]`` as strings; ``q<i>`` without one); a repeated id is a
    ``UserError``."""
    ids = batch.get("id")
    if ids is None:
        return [f"q{i}" for i in range(len(batch["prompt"]))]
    ids = [str(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise UserError(f"question ids repeat within a batch: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    return ids


def label_votes(votes: Rollouts, batch: dict[str, list], voting: VotingSpec, context: LabellingContext, *,
                signal_names: Sequence[str], calibration: dict[str, Any] | None = None, global_step: int = 0,
                negative_shift: float = 0.0) -> RolloutRewards:
    """Pseudo-label every question of ``batch`` from its ``votes`` and lay the rewards out on the rows trained
    on (module docstring): the labels' [Q, V * M] rewards are viewed [Q, V, M], cut to N and put prompt-major
    ([V * Q * N], prompt ``v * Q + q``).

    voting: the labeler, its options, M and N, the answer extractor and the warm-up (``VotingSpec``);
    context: what the labeler's hooks read (``LabellingContext``); signal_names: the signals recorded while
    sampling; calibration: the fitted ``{"options": {...}}`` of a calibrated labeler (they replace
    ``voting.options``' calibration options); global_step: the training step (the majority warm-up runs for
    the first ``voting.warmup_majority_steps``); negative_shift: RESTRAIN's delta (``AdvantageSpec``)."""
    labeler = labeler_spec(voting.labeler)
    Q = len(batch["prompt"])
    ids = question_ids(batch)
    views = vote_views(labeler, Q)
    choices = batch.get("choices") or [None] * Q
    groups = votes_by_question(votes, Q, views, choices, vote_signal_names(labeler, signal_names, votes),
                               voting.answer_extractor)
    name = voting.labeler
    extra = labeler.inputs(context, votes, groups) if labeler.inputs else [{} for _ in groups]
    if labeler.reads_gold:  # the gold_reward control
        golds = batch.get("gold")
        missing = [ids[q] for q in range(Q) if golds is None or golds[q] is None]
        if missing:
            raise UserError(f"{name} rewards with the gold answers, but questions {missing[:5]} have none")
        extra = [dict(e, gold=str(golds[q])) for q, e in enumerate(extra)]
    kwargs = {k: v for k, v in voting.options.items() if k not in labeler.calibration_options}
    if calibration:
        kwargs.update(calibration.get("options", {}))
    if global_step < voting.warmup_majority_steps:
        kwargs["warmup_majority"] = True
    budget = [q for q in range(Q) if budgeted(ids[q], voting.gold_budget)]
    if budget:  # a label budget: these questions are labelled with their gold answers (VotingSpec.gold_budget)
        golds = batch.get("gold")
        missing = [ids[q] for q in budget if golds is None or golds[q] is None]
        if missing:
            raise UserError(f"voting.gold_budget labels questions {missing[:5]} with their gold answers, but they "
                            "have none")
    labels = [pseudo_label("gold_reward", group, choices=choices[q], gold=str(batch["gold"][q])) if q in budget
              else pseudo_label(name, group, choices=choices[q], **kwargs, **extra[q])
              for q, group in enumerate(groups)]
    M, N = voting.num_votes, voting.num_trained
    V = len(views) // Q
    wrong = [(ids[q], len(lab.rewards)) for q, lab in enumerate(labels) if len(lab.rewards) != V * M]
    if wrong:
        raise RuntimeError(f"{name} returned {wrong[0][1]} rewards for {V * M} rollouts of question "
                           f"{wrong[0][0]!r}")
    rewards = torch.tensor([lab.rewards for lab in labels], dtype=torch.float32)  # [Q, V * M]
    if not bool(torch.isfinite(rewards).all()):
        raise RuntimeError(f"{name} returned a non-finite reward")
    row_mask = torch.tensor([lab.row_mask if lab.row_mask is not None else [True] * (V * M) for lab in labels],
                            dtype=torch.bool)
    step = VoteStep(votes, labels, [list(group.answers) for group in groups], ids, M, N)
    trained = step.trained_rows()
    device = trained.completion_ids.device
    negative = negative_shift > 0  # RESTRAIN's negative branch trains a question that failed the gate
    group_mask = torch.tensor([not lab.abstain or (negative and lab.negative) for lab in labels],
                              dtype=torch.bool).repeat(V)
    return RolloutRewards(trained_layout(rewards, V, M, N).to(device), group_mask.to(device),
                          trained_layout(row_mask, V, M, N).to(device), rollouts=trained, detail=step)

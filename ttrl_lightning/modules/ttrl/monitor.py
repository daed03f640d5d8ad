"""TTRL's logged metrics of one step (TTRL's names), computed from the step's records; gold is read here only.

``ttrl_metrics(scored, golds, choices, counters, token_kl=...)`` is a function of the step's
``RolloutRewards`` (its ``VoteStep`` detail) and the batch's gold answers; the only state it touches is the run's ``TTRLCounters`` (cumulative counts,
checkpointed with the module):

* ``label_accuracy``: labelled questions whose pseudo-label equals gold (answer equivalence);
* ``reward_accuracy``: over the trained rollouts of the kept questions, how far the pseudo-reward agrees with the
  gold reward ``1[answer right]``: ``1 - |min(max(r, 0), 1) - 1[right]|``, averaged. For a 0/1 reward that is the
  share of rows whose reward equals the gold reward (TTRL's reward hit rate, its working condition: above 80%
  in the TTRL maintainers' runs; most wrong rollouts correctly get 0, so it is high even when labels are often
  wrong); for a soft or gated reward in [0, 1] (``soft_majority``, Self-Harmony's gated fused reward) one minus
  the mean absolute gap. Only for labelling methods (``rewards_are_labels``): a continuous reward
  (self-certainty, entropy) or a random one is not a statement about correctness, so it is not logged for them;
* ``majority_ratio``: the most frequent answer's share of the votes (all labelers);
* ``flip_rate`` (TTRL-Guard's early warning of lock-in): among the batch's questions labelled before, the share
  whose original-view majority answer differs (answer equivalence) from the last time the question was labelled;
  not logged on a step where no question was seen before (an online stream's first pass);
* ``negative_rate``: questions trained on RESTRAIN's negative branch (``PseudoLabel.negative`` with
  ``advantage.negative_shift`` > 0; ``negative_branch``), counted as abstained in ``coverage``;
* ``coverage`` / ``abstention_rate``: questions labelled / abstained; ``err_at_sel``: error of the labels on
  the labelled (selected) questions (Pixelis' Err@Sel); ``accepted_per_1k``: accepted updates (questions that
  contributed gradient) per 1,000 processed questions, cumulative over the run;
* ``vote_tokens``: completion tokens sampled for the votes (every view), the step's sampling work;
* ``kl_p50``, ``kl_p95``: quantiles of the token KL to the reference over the tokens that carry loss (kept
  questions, kept rows: the tokens ``train/kl``, the PID controller's observation, averages);
* ``vote_accuracy``: the share of the original view's M votes whose answer is right (avg@M of the batch's
  questions under the policy sampling them: the trained-on accuracy over steps, measured at no extra cost);
* ``online_accuracy``: the original view's majority vote vs gold when a question is seen (the pre-update
  accuracy on an online stream; Pixelis' "before" on the stream); ``TTRLCounters.label_vs_majority`` counts,
  over the run, over the labelled questions, those whose pseudo-label is right where that majority is wrong
  (``recovered``) and the reverse (``lost``), and the abstained ones apart: Self-Harmony's claim, counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from ttrl_lightning.answers import NO_ANSWER, answers_equal
from ttrl_lightning.consensus import aggregate
from ttrl_lightning.modules.step_records import RolloutRewards

__all__ = ["TTRLCounters", "ttrl_metrics"]

#: (label right, original-view majority right) -> the counter of ``TTRLCounters.label_vs_majority``
AGREEMENT = {(True, True): "both_right", (True, False): "recovered", (False, True): "lost",
             (False, False): "both_wrong"}


def _agreement_counts() -> dict[str, int]:
    return dict.fromkeys((*AGREEMENT.values(), "abstained"), 0)


@dataclass
class TTRLCounters:
    """What a TTRL run counts across steps: questions seen and accepted (``accepted_per_1k``), labels vs the
    original view's majority (``label_vs_majority``, by ``AGREEMENT``; abstained questions apart) and every
    label given (``label_history``: ``(step, question id, label)``)."""

    questions_seen: int = 0
    questions_accepted: int = 0
    label_vs_majority: dict[str, int] = field(default_factory=_agreement_counts)
    label_history: list[tuple[int, str, str | None]] = field(default_factory=list)
    last_majority: dict[str, str] = field(default_factory=dict)

    def state_dict(self) -> dict:
        return {"questions_seen": self.questions_seen, "questions_accepted": self.questions_accepted,
                "label_vs_majority": dict(self.label_vs_majority),
                "label_history": [list(x) for x in self.label_history],
                "last_majority": dict(self.last_majority)}

    def load_state_dict(self, state: dict) -> None:
        self.questions_seen = int(state.get("questions_seen", 0))
        self.questions_accepted = int(state.get("questions_accepted", 0))
        self.label_vs_majority.update(state.get("label_vs_majority", {}))
        self.label_history = [tuple(x) for x in state.get("label_history", [])]
        self.last_majority = dict(state.get("last_majority", {}))

    def flips(self, ids: Sequence[str], majorities: Sequence[str]) -> tuple[int, int]:
        """``(flipped, seen before)`` over the questions ``ids`` whose majority answers are ``majorities``, and
        remember these answers: a question flips when its answer is not equivalent to the last one."""
        flipped = again = 0
        for qid, answer in zip(ids, majorities):
            last = self.last_majority.get(qid)
            if last is not None:
                again += 1
                flipped += int(last != answer and not _same(last, answer))
            self.last_majority[qid] = answer
        return flipped, again


def ttrl_metrics(scored: RolloutRewards, golds: Sequence | None, choices: Sequence | None, counters: TTRLCounters, *,
                 step_index: int, token_kl: torch.Tensor | None = None,
                 completion_mask: torch.Tensor | None = None, rewards_are_labels: bool = True,
                 negative_branch: bool = False) -> dict[str, float]:
    """This step's TTRL metrics (module docstring), counted into ``counters``. ``golds``: the batch's gold
    answers (None, or None entries: not monitored); ``token_kl`` / ``completion_mask``: [R, C] of the trained
    rows (the quantiles are taken over the tokens of the kept questions' kept rows)."""
    step = scored.detail
    Q = len(step.labels)
    counters.questions_seen += Q
    accepted = [not lab.abstain for lab in step.labels]
    counters.questions_accepted += sum(accepted)
    counters.label_history.extend((step_index, qid, lab.label) for qid, lab in zip(step.ids, step.labels))
    M = step.num_votes
    out: dict[str, float] = {
        "coverage": sum(accepted) / Q,
        "abstention_rate": 1 - sum(accepted) / Q,
        "accepted_per_1k": 1000.0 * counters.questions_accepted / max(counters.questions_seen, 1),
        "majority_ratio": sum(_majority_ratio(a) for a in step.answers) / Q,
        "vote_tokens": float(step.votes.num_completion_tokens),
    }
    if negative_branch:
        out["negative_rate"] = sum(lab.negative for lab in step.labels) / Q
    majorities = [aggregate(a[:M], "majority").answer for a in step.answers]  # the original view's
    flipped, again = counters.flips(step.ids, majorities)
    if again:
        out["flip_rate"] = flipped / again
    if token_kl is not None and completion_mask is not None and completion_mask.shape == token_kl.shape:
        rows = scored.kept_rows().to(token_kl.device)
        vals = token_kl[rows[:, None] & completion_mask.to(token_kl.device).bool()].float()
        if vals.numel():
            out["kl_p50"] = float(torch.quantile(vals, 0.5))
            out["kl_p95"] = float(torch.quantile(vals, 0.95))
    if not golds or all(g is None for g in golds):
        return out
    choices = choices or [None] * Q
    labelled, right, online, votes_right = 0, 0, [], []
    rew_agree, rew_total = 0, 0
    N = step.num_trained
    rewards = scored.rewards.view(-1, N)
    for q, (lab, gold) in enumerate(zip(step.labels, golds)):
        if gold is None:
            continue
        correct = _correct_classes(step.answers[q], str(gold))
        majority_right = majorities[q] in correct
        online.append(majority_right)
        votes_right.append(sum(a in correct for a in step.answers[q][:M]) / M)
        label_right = lab.label is not None and not lab.abstain and _same(lab.label, str(gold))
        if lab.abstain:
            counters.label_vs_majority["abstained"] += 1
        elif lab.label is not None:
            counters.label_vs_majority[AGREEMENT[(label_right, majority_right)]] += 1
        if lab.label is not None and not lab.abstain:
            labelled += 1
            right += int(label_right)
        if lab.abstain or not rewards_are_labels:
            continue
        for v in range(rewards.shape[0] // Q):
            for j in range(N):
                r = min(max(float(rewards[v * Q + q, j]), 0.0), 1.0)
                rew_agree += 1.0 - abs(r - float(step.answers[q][v * M + j] in correct))
                rew_total += 1
    if online:
        out["online_accuracy"] = sum(online) / len(online)
        out["vote_accuracy"] = sum(votes_right) / len(votes_right)
    if labelled:
        out["label_accuracy"] = right / labelled
        out["err_at_sel"] = 1 - right / labelled
    if rew_total:
        out["reward_accuracy"] = rew_agree / rew_total
    return out


def _majority_ratio(answers: Sequence[str]) -> float:
    """The winning answer's share of the votes (``consensus`` majority, its tie rule)."""
    decision = aggregate(answers, "majority")
    return decision.support[decision.answer] / len(answers)


def _same(answer: str, gold: str) -> bool:
    return answer != NO_ANSWER and answers_equal(answer, gold)


def _correct_classes(answers: Sequence[str], gold: str) -> set[str]:
    """The canonical answers among ``answers`` equal to ``gold``."""
    return {a for a in set(answers) if _same(a, gold)}

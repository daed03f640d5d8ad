"""Reward controls for test-time RL: what a pseudo-label's gain is measured against. Neither is a TTRL method.

* ``random_reward`` (Spurious Rewards, Shao et al. 2025, arXiv 2506.10947): ``r_i ~ Bernoulli(p)``, ``p = 0.5``,
  drawn independently of the rollout from ``random.Random(seed)``. It says how much of a gain comes from
  training on the model's own samples at all (a format or length shift, GRPO's clipping bias) rather than from
  the reward's information: random rewards gave Qwen2.5-Math-7B +21 points on MATH-500 there. No label, never
  abstains.
* ``gold_reward`` (RLVR with the true answers, the upper bound): ``y* = gold``, ``r_i = 1[y_i = gold]``
  (answer equivalence, as every labeler's reward). It **reads the gold answer**: the one labeler that does
  (``modules.ttrl.labelers.LabelerSpec.reads_gold``), so it is a control, never a test-time method.
* ``null_reward``: ``r_i = c`` for every rollout (``c = 0``). Every group-normalised advantage is 0, so a run
  with it moves only by what does not come from a reward: the KL term, the optimizer's own drift (AdamW's weight
  decay) and numerics. It isolates that drift from any signal.
* ``format_reward``: ``r_i = 1`` when an answer can be extracted from rollout ``i`` (its class is not
  :data:`~ttrl_lightning.answers.NO_ANSWER`), else 0. It says how much of a gain comes from learning to answer
  in the expected form at all, with no information on which answer is right.
"""
from __future__ import annotations

import random

from ..answers import NO_ANSWER
from .pseudo_label import PSEUDO_LABELERS, PseudoLabel, PseudoLabelError
from .rollouts import question_votes
from .question_votes import matches

__all__ = ["random_reward", "gold_reward", "null_reward", "format_reward"]


@PSEUDO_LABELERS.register("random_reward")
def random_reward(votes, *, choices=None, seed: int, p: float = 0.5) -> PseudoLabel:
    """Bernoulli(``p``) rewards from ``random.Random(seed)``, one per rollout in order; see the module docstring."""
    group = question_votes(votes, choices, "random_reward")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise PseudoLabelError(f"random_reward: p must be a probability in [0, 1], got {p!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise PseudoLabelError(f"random_reward: seed must be an integer, got {seed!r}")
    rng = random.Random(seed)
    rewards = [1.0 if rng.random() < p else 0.0 for _ in range(len(group))]
    return PseudoLabel(None, rewards, False, {"reward": f"Bernoulli({p}) (Spurious Rewards control)"})


@PSEUDO_LABELERS.register("gold_reward")
def gold_reward(votes, *, choices=None, gold: str) -> PseudoLabel:
    """The gold answer as the label and ``1[y_i = gold]`` as the reward; see the module docstring."""
    group = question_votes(votes, choices, "gold_reward")
    if gold is None or not str(gold).strip():
        raise PseudoLabelError("gold_reward needs the question's gold answer, got none")
    gold = str(gold).strip()
    answers, gold_class = group.classes_with(gold)  # gold joins its class
    if gold_class == NO_ANSWER:
        raise PseudoLabelError(f"gold_reward: the gold answer {gold!r} is not an answer")
    return PseudoLabel(gold, matches(answers, gold_class), False, {"reward": "1[answer = gold] (RLVR)"})


@PSEUDO_LABELERS.register("null_reward")
def null_reward(votes, *, choices=None, value: float = 0.0) -> PseudoLabel:
    """The constant reward ``value`` for every rollout, no label; see the module docstring."""
    group = question_votes(votes, choices, "null_reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        raise PseudoLabelError(f"null_reward: value must be a finite number, got {value!r}")
    return PseudoLabel(None, [float(value)] * len(group), False, {"reward": f"constant {float(value):g} (null control)"})


@PSEUDO_LABELERS.register("format_reward")
def format_reward(votes, *, choices=None) -> PseudoLabel:
    """``1[an answer is extracted]`` per rollout, no label; see the module docstring."""
    group = question_votes(votes, choices, "format_reward")
    rewards = [0.0 if a == NO_ANSWER else 1.0 for a in group.answers]
    return PseudoLabel(None, rewards, False, {"reward": "1[an answer parses] (format control)"})

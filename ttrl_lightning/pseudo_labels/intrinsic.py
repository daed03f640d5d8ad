"""Continuous intrinsic-reward baselines: no label, one reward per rollout from its own token signals.

* ``self_certainty`` (Intuitor, Zhao et al. 2025): ``r_i = (1/T_i) sum_t KL(U || p_{i,t})``, the rollout's
  mean token self-certainty (``signals.self_certainty_score``).
* ``entropy`` (RENT, Prabhudesai et al. 2025): ``r_i = -(1/T_i) sum_t H_{i,t}``, minus the mean token
  entropy.

Both return ``label=None`` and ``abstain=False`` (they never abstain and never vote); the rewards are raw
(not normalised: GRPO's group advantage does that). They are gamed by repetition and short outputs
(ANCHORS, "Intuitor"); they are here because users compare against them.
"""
from __future__ import annotations

from ..signals import self_certainty_score
from .pseudo_label import PSEUDO_LABELERS, PseudoLabel
from .rollouts import question_votes

__all__ = ["self_certainty_reward", "entropy_reward"]


@PSEUDO_LABELERS.register("self_certainty")
def self_certainty_reward(votes, *, choices=None) -> PseudoLabel:
    """Intuitor: reward = mean token self-certainty; needs per-token ``self_certainty`` on every rollout."""
    group = question_votes(votes, choices, "self_certainty")
    rewards = [float(self_certainty_score(x)) for x in group.token_signals("self_certainty", "self_certainty")]
    return PseudoLabel(None, rewards, False, {"reward": "mean token self-certainty (Intuitor)"})


@PSEUDO_LABELERS.register("entropy")
def entropy_reward(votes, *, choices=None) -> PseudoLabel:
    """RENT: reward = -mean token entropy; needs per-token ``entropy`` on every rollout."""
    group = question_votes(votes, choices, "entropy")
    rewards = [-float(x.mean()) for x in group.token_signals("entropy", "entropy")]
    return PseudoLabel(None, rewards, False, {"reward": "minus mean token entropy (RENT)"})

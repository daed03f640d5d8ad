"""The records the RL step's stages hand each other (torchtune's ``GRPOTrajectory`` / ``GRPOStats``): each
field stored once, in the record of the stage that decides it.

* ``RolloutRewards``: what ``score`` returns: the rewards of the rows trained on, the group mask (abstained
  groups), the row mask (rows rejected from the update), the rows themselves, the stage's scalars and its
  ``detail``;
* ``VoteStep``: what only TTRL's voting knows, the ``detail`` of its ``RolloutRewards``: every vote, the
  pseudo-labels, the votes' canonical answers and the question ids;
* ``RewardParts``: CC-RFT's reward terms per row, the ``detail`` of its ``RolloutRewards``;
* ``StepStats`` (with ``SamplerCorrection``): what ``optimize`` measured.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from ttrl_lightning.masking import masked_token_mean
from ttrl_lightning.pseudo_labels.pseudo_label import PseudoLabel
from ttrl_lightning.rollout.base import Rollouts

__all__ = ["RolloutRewards", "VoteStep", "RewardParts", "StepStats", "SamplerCorrection"]


@dataclass(frozen=True)
class VoteStep:
    """What one step's voting decided, beyond the rewards (which live in the ``RolloutRewards`` it details).

    votes: the M votes of every prompt (prompt-major; prompts are the questions, then their fused prompts);
    labels: one ``PseudoLabel`` per question; answers: each question's canonical vote answers, views in order;
    ids: the question ids; num_votes: M votes per prompt; num_trained: N, the first rows of every prompt that
    are trained on (``RolloutRewards.rollouts``).
    """

    votes: Rollouts
    labels: list[PseudoLabel]
    answers: list[list[str]]
    ids: list[str]
    num_votes: int
    num_trained: int

    def trained_rows(self) -> Rollouts:
        """The rows trained on: the first N votes of every prompt."""
        return self.votes.first_per_group(self.num_trained)


@dataclass(frozen=True)
class RewardParts:
    """CC-RFT's reward terms, [R] each (Pixelis sec. 3.2.2): answer correctness, curiosity, coherence and the
    number of tool calls of every trajectory."""

    correct: torch.Tensor
    curiosity: torch.Tensor
    coherence: torch.Tensor
    calls: torch.Tensor


@dataclass(frozen=True)
class RolloutRewards:
    """What the ``score`` hook returns for the R = G * N rows trained on (prompt-major: N rows per group).

    rewards: [R] float, one per rollout row;
    group_mask: [G] bool, False for a group that abstains (e.g. no pseudo-label: TTRL, Pixelis' abstention):
    its rows get advantage 0 and are left out of the loss (no gradient, no weight in the aggregation), and
    the step counts them (``train/abstained_groups``). None: every group is kept. Our reading of Pixelis sec.
    3.2.3's "we abstain; KL safety remains active": the KL-to-EMA corridor (the controller and its beta on
    the step's updated rows) stays in force while questions abstain, but an abstained question's own rows
    carry no KL term either: they would contribute only a pull toward the anchor on questions nobody labelled.
    For the same reason the step's KL observation (``GRPOModule.observed_kl``: the controller's input,
    ``train/kl``; and ``train/kl_p95``) averages the tokens that carry loss only, so an abstained question's
    KL does not move beta for an update that did not happen; a step where every group abstains is no
    observation (beta held).
    row_mask: [R] bool, False for a single rollout left out of the update (Pixelis' near-duplicates): it
    still counts in its group's advantage statistics (its reward is a vote's), but carries no policy or KL
    term, no weight in the aggregation and no part in the KL observation (``train/dropped_rows``). None: every
    row is kept.
    rollouts: the rows these rewards score, when the hook trains on a subset of what ``rollout`` sampled
    (TTRL: the first N of every prompt's M votes); None: all of them (``scored`` fills it in).
    metrics: scalars of the reward stage, logged as ``train/<name>`` by ``step_metrics`` (CC-RFT's reward
    parts).
    detail: what the reward stage decided, for a subclass's ``step_metrics``: TTRL's ``VoteStep``, CC-RFT's
    ``RewardParts``; None for GRPO's reward callables.
    """

    rewards: torch.Tensor
    group_mask: torch.Tensor | None = None
    row_mask: torch.Tensor | None = None
    rollouts: Rollouts | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    detail: VoteStep | RewardParts | None = None

    def check(self, num_rows: int, num_groups: int) -> RolloutRewards:
        """Self, after checking the shapes (rewards [num_rows], group_mask [num_groups] and row_mask [num_rows]
        bool)."""
        r = self.rewards
        if not isinstance(r, torch.Tensor) or r.shape != (num_rows,):
            got = tuple(r.shape) if isinstance(r, torch.Tensor) else type(r).__name__
            raise ValueError(f"rewards must be a tensor of shape [{num_rows}], got {got}")
        self.mask(num_groups)
        self.rows(num_rows)
        return self

    def rows(self, num_rows: int) -> torch.Tensor:
        """row_mask as a [num_rows] bool tensor on the rewards' device (all True when None)."""
        return self._bool_mask("row_mask", num_rows)

    def _bool_mask(self, name: str, size: int) -> torch.Tensor:
        """The field ``name`` as a [size] bool tensor on the rewards' device (all True when None)."""
        value = getattr(self, name)
        if value is None:
            return torch.ones(size, dtype=torch.bool, device=self.rewards.device)
        m = torch.as_tensor(value, device=self.rewards.device)
        if m.dtype != torch.bool or m.shape != (size,):
            raise ValueError(f"{name} must be a bool tensor of shape [{size}], got {m.dtype} {tuple(m.shape)}")
        return m

    def mask(self, num_groups: int) -> torch.Tensor:
        """group_mask as a [num_groups] bool tensor on the rewards' device (all True when None)."""
        return self._bool_mask("group_mask", num_groups)

    # the sizes of the rows scored (``rollouts``, filled in by ``GRPOModule.scored``)
    @property
    def num_rows(self) -> int:
        """R, the rows scored."""
        return int(self._scored_rollouts().completion_ids.shape[0])

    @property
    def group_size(self) -> int:
        """N, the rows of one group (prompt-major)."""
        return int(self._scored_rollouts().n)

    @property
    def num_groups(self) -> int:
        """G = R / N."""
        return self.num_rows // self.group_size

    def kept_groups(self) -> torch.Tensor:
        """[G] bool: the groups that do not abstain (``group_mask``)."""
        return self.mask(self.num_groups)

    def kept_rows(self) -> torch.Tensor:
        """[R] bool: the rows of kept groups that ``row_mask`` keeps, the rows that carry loss."""
        return self.kept_groups().repeat_interleave(self.group_size) & self.rows(self.num_rows)

    def by_group(self, values: torch.Tensor) -> torch.Tensor:
        """[R] per-row ``values`` viewed [G, N]."""
        return values.view(self.num_groups, self.group_size)

    def _scored_rollouts(self) -> Rollouts:
        if self.rollouts is None:
            raise ValueError("RolloutRewards.rollouts is not set: the sizes are known once GRPOModule.scored "
                             "has filled it in")
        return self.rollouts


@dataclass(frozen=True)
class SamplerCorrection:
    """The trainer-vs-sampler comparison of one step (engines with their own weights): ``weights`` [R, C] the
    truncated importance weights (None without a cap), ``gap`` the mean |logp_policy - logp_sampler| over the
    completion tokens (both under the raw logits)."""

    weights: torch.Tensor | None
    gap: torch.Tensor

    def metrics(self, kept_tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The gap, and the mean TIS weight over the tokens that carry loss (not logged on a step that trains
        no token: a mean of nothing is not 0)."""
        out = {"train/sampler_logprob_gap": self.gap}
        if self.weights is not None and bool(kept_tokens.sum() > 0):
            out["train/tis_weight"] = masked_token_mean(self.weights, kept_tokens)
        return out


@dataclass(frozen=True)
class StepStats:
    """What the optimisation of one step measured (torchtune's ``GRPOStats``), for ``step_metrics``.

    loss: the last iteration's loss (detached); token_kl: [R, C] k3 KL to the reference of the last iteration
    (None with ``reference="none"``); clipped: [R, C] the clip indicator of the last iteration; kept_tokens:
    [R, C] float, the completion tokens that carry loss (kept groups and rows); sampler: the trainer-vs-sampler
    correction of an engine with its own weights (None otherwise).
    """

    loss: torch.Tensor
    token_kl: torch.Tensor | None
    clipped: torch.Tensor
    kept_tokens: torch.Tensor
    sampler: SamplerCorrection | None = None

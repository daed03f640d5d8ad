"""The result of a pseudo-labeler, its error, the registry of labelers and the one public entry point."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import UserError
from ..registry import Registry

__all__ = ["PseudoLabel", "PseudoLabelError", "PSEUDO_LABELERS", "pseudo_label"]


class PseudoLabelError(UserError):
    """Votes a pseudo-labeler cannot label: the message names the rollout and the field."""


@dataclass
class PseudoLabel:
    """What a pseudo-labeler decided for one question's rollouts.

    Attributes:
        label: the pseudo-label (an answer string, the representative of its equivalence class), or
            ``None`` when the labeler abstains or is a continuous intrinsic reward (no label at all).
        rewards: one reward per rollout, in the order the rollouts were given.
        abstain: ``True`` when the question should contribute no gradient (the rewards are then all 0).
        info: what the labeler measured (support, margin, penalties, the signal used, ...), for logging.
        row_mask: per rollout, ``False`` for one the labeler leaves out of the update while its reward still
            counts in the question's statistics (Pixelis' near-duplicate rollouts, sec. 3.2.3); ``None``:
            every rollout is updated. The same name from here to the loss (``RolloutRewards.row_mask``).
        negative: ``True`` for an abstention that says the votes agree too little to label (``majority``'s
            consensus gate): under RESTRAIN's negative branch (``AdvantageSpec.negative_shift`` delta > 0) the
            question's rows are trained with reward 0 and advantage ``-delta`` instead of left out.
    """

    label: str | None
    rewards: list[float]
    abstain: bool = False
    info: dict = field(default_factory=dict)
    row_mask: list[bool] | None = None
    negative: bool = False

    def __post_init__(self):
        if self.row_mask is not None and len(self.row_mask) != len(self.rewards):
            raise ValueError(f"row_mask has {len(self.row_mask)} entries for {len(self.rewards)} rewards")
        if self.negative and not self.abstain:
            raise ValueError("a negative-branch label (negative=True) is an abstention (abstain=True)")


#: ``name -> labeler(votes, *, choices=None, **options) -> PseudoLabel``; ``votes`` (one question's) is a
#: ``votes.QuestionVotes`` or a list of pool-schema rollout dicts (``rollouts.question_votes`` reads either)
PSEUDO_LABELERS: Registry[Callable[..., PseudoLabel]] = Registry("pseudo-labeler")


def pseudo_label(method: str, votes, **kw) -> PseudoLabel:
    """Apply the pseudo-labeler ``method`` (a name in :data:`PSEUDO_LABELERS`) to one question's votes (a
    ``votes.QuestionVotes`` or pool-schema rollout dicts).

    Unknown names raise ``KeyError`` listing the known ones.
    """
    return PSEUDO_LABELERS[method](votes, **kw)

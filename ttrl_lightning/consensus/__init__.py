"""Consensus rules: turn one question's rollouts into a chosen answer / pseudo-label.

See :mod:`.rules` for the registry of single-view rules, :mod:`.views` for Self-Harmony's two-view HMS,
:mod:`.abstention` for Pixelis' margin / conformal abstention and :mod:`.dawid_skene` for rollout reliability.
"""
from .abstention import conformal_set, conformal_threshold, normalised_support, vote_margin
from .dawid_skene import dawid_skene, dawid_skene_reliability, rollout_annotator_labels
from .decision import Decision
from .ranks import average_ranks, borda_weights, rank_weights
from .rules import CONSENSUS, aggregate, pixelis_weights
from .views import dual_view_majority, harmonic_mean_select

__all__ = [
    "CONSENSUS", "Decision", "aggregate", "average_ranks", "borda_weights", "conformal_set",
    "conformal_threshold", "dual_view_majority", "harmonic_mean_select", "normalised_support",
    "pixelis_weights", "rank_weights", "vote_margin", "dawid_skene", "dawid_skene_reliability",
    "rollout_annotator_labels",
]


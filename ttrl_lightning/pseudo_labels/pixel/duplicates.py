"""Pixel TTRL's near-duplicate rollouts (appendix 6, practical note iii), for text: character 3-gram Jaccard
similarity; a rollout too similar to an earlier kept one leaves the update (``PseudoLabel.row_mask``)."""
from __future__ import annotations

from ttrl_lightning.pseudo_labels.question_votes import QuestionVotes

__all__ = ["rollout_similarity", "duplicate_row_mask"]


def _grams(text: str) -> frozenset[str]:
    return frozenset([text]) if len(text) < 3 else frozenset(text[i:i + 3] for i in range(len(text) - 2))


def rollout_similarity(a: str, b: str) -> float:
    """Jaccard index ``|G(a) & G(b)| / |G(a) | G(b)|`` of the character 3-gram sets ``G`` of two completions
    (a text shorter than 3 characters is its own single gram): 1.0 for exact duplicates, 0.0 for disjoint
    texts. The text analogue of Pixelis' frame-IoU."""
    ga, gb = _grams(a), _grams(b)
    return len(ga & gb) / len(ga | gb)


def duplicate_row_mask(group: QuestionVotes, threshold: float | None) -> list[bool]:
    """Per vote, False when its similarity to an earlier kept vote exceeds ``threshold`` (None: all True)."""
    if threshold is None:
        return [True] * len(group)
    texts = group.texts
    keep: list[bool] = []
    for j, t in enumerate(texts):
        dup = t is not None and any(keep[i] and texts[i] is not None
                                    and rollout_similarity(t, texts[i]) > threshold for i in range(j))
        keep.append(not dup)
    return keep

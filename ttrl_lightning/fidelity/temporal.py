"""Temporal localisation fidelity: temporal IoU and an F1 over segments (the VTG / UniVTG protocol).

``tIoU([s1, e1], [s2, e2]) = max(0, min(e1, e2) - max(s1, s2)) / (max(e1, e2) - min(s1, s2))`` on continuous
intervals (seconds or frame edges). Segments of inclusive frame indices ``[a, b]`` (what TEMP returns) are
the intervals ``[a, b + 1]``: :func:`frame_segment_iou`.

:func:`segment_f1`: predicted and reference segments matched one to one by descending tIoU, a match counting
when tIoU >= ``threshold`` (0.5, the TEMP pass threshold of Pixelis' audit); ``F1 = 2PR / (P + R)``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ttrl_lightning.fidelity.iou import greedy_match


def temporal_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """tIoU of intervals ``[start, end]`` (end > start; a degenerate union gives 0)."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 and inter > 0 else 0.0


def frame_segment_iou(a: Sequence[int], b: Sequence[int]) -> float:
    """tIoU of inclusive frame segments ``[a0, a1]`` and ``[b0, b1]``."""
    return temporal_iou((a[0], a[1] + 1), (b[0], b[1] + 1))


def segment_f1(
    predicted: Sequence[Sequence[int]],
    reference: Sequence[Sequence[int]],
    *,
    threshold: float = 0.5,
    frames: bool = True,
) -> float:
    """F1 of predicted vs reference segments at tIoU >= ``threshold`` (inclusive frames unless
    ``frames=False``).
    No segment on either side scores 1; on one side only, 0."""
    if not predicted and not reference:
        return 1.0
    if not predicted or not reference:
        return 0.0
    iou = frame_segment_iou if frames else temporal_iou
    scores = np.array([[iou(p, r) for r in reference] for p in predicted])
    tp = sum(1 for _, _, s in greedy_match(scores) if s >= threshold)
    precision, recall = tp / len(predicted), tp / len(reference)
    return 2 * precision * recall / (precision + recall) if tp else 0.0

"""Intersection over union of boxes and masks (Pixelis 4.1, tool fidelity: "IoU (boxes/masks)").

``IoU(A, B) = |A ∩ B| / |A ∪ B|``; boxes are ``[x0, y0, x1, y1]`` with ``x1, y1`` exclusive edges (any
consistent unit: pixels or normalised), masks ``[H, W]`` boolean arrays or the RLE dicts of tool artifacts.
An empty union (two empty masks, two degenerate boxes) gives 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def box_iou(a: Any, b: Any) -> float:
    """IoU of two boxes ``[x0, y0, x1, y1]``."""
    ax0, ay0, ax1, ay1 = (float(v) for v in a)
    bx0, by0, bx1, by1 = (float(v) for v in b)
    inter = max(0.0, min(ax1, bx1) - max(ax0, bx0)) * max(0.0, min(ay1, by1) - max(ay0, by0))
    union = max(0.0, ax1 - ax0) * max(0.0, ay1 - ay0) + max(0.0, bx1 - bx0) * max(0.0, by1 - by0) - inter
    return inter / union if union > 0 else 0.0


def box_iou_matrix(a: Any, b: Any) -> np.ndarray:
    """``a: [N, 4]``, ``b: [M, 4]`` -> ``[N, M]`` pairwise IoU."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(-1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _as_mask(m: Any) -> np.ndarray:
    if isinstance(m, dict):
        from ttrl_lightning.tools.serialise import rle_to_mask

        return rle_to_mask(m)
    return np.asarray(m).astype(bool)


def mask_iou(a: Any, b: Any) -> float:
    """IoU of two masks (``[H, W]`` arrays or RLE dicts of the same size)."""
    ma, mb = _as_mask(a), _as_mask(b)
    if ma.shape != mb.shape:
        raise ValueError(f"masks of different sizes {ma.shape} and {mb.shape}")
    union = int(np.count_nonzero(ma | mb))
    return int(np.count_nonzero(ma & mb)) / union if union else 0.0


def greedy_match(scores: np.ndarray, threshold: float = 0.0) -> list[tuple[int, int, float]]:
    """One-to-one matching of rows and columns of ``scores [N, M]`` by descending score (ties: lower row,
    then lower column), keeping pairs with score > ``threshold``: ``[(row, col, score), ...]``."""
    scores = np.asarray(scores, dtype=np.float64)
    pairs = sorted(
        ((float(scores[i, j]), i, j) for i in range(scores.shape[0]) for j in range(scores.shape[1])),
        key=lambda p: (-p[0], p[1], p[2]),
    )
    used_r, used_c, out = set(), set(), []
    for s, i, j in pairs:
        if s > threshold and i not in used_r and j not in used_c:
            used_r.add(i)
            used_c.add(j)
            out.append((i, j, s))
    return out

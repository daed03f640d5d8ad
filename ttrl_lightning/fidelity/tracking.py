"""Tracking fidelity: HOTA (Luiten et al. 2021) and CLEAR-MOT (Bernardin & Stiefelhagen 2008) through
TrackEval, the official implementation (Pixelis 4.1 / supp. S10: "HOTA/CLEAR-MOT via TrackEval ... official
defaults"): similarity = box IoU, CLEAR / Identity match threshold 0.5, HOTA averaged over the 19 thresholds
alpha = 0.05 .. 0.95.

Tracks are ``{track id: {frame: [x0, y0, x1, y1]}}`` for the truth and the prediction (any hashable ids, any
frame indices, boxes in one unit). :func:`tracking_metrics` returns HOTA, DetA, AssA, LocA (means over alpha),
MOTA, MOTP, IDSW, IDF1 and the counts; TrackEval imports lazily (the ``tools`` extra).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Hashable, Mapping

import numpy as np

from ttrl_lightning.fidelity.iou import box_iou_matrix

Tracks = Mapping[Hashable, Mapping[int, Any]]


def _trackeval():
    try:
        import trackeval
    except ImportError as err:
        raise ImportError("HOTA / CLEAR-MOT need trackeval (pip install 'ttrl_lightning[tools]')") from err
    return trackeval


def sequence_data(truth: Tracks, predicted: Tracks) -> dict[str, Any]:
    """The per-sequence dict TrackEval's metrics read: ids renumbered 0.. per side (sorted by first frame,
    then id), per-frame id arrays and IoU similarity matrices ``[n_gt_t, n_pred_t]``."""
    frames = sorted({int(t) for tr in (truth, predicted) for boxes in tr.values() for t in boxes})
    out: dict[str, Any] = {
        "num_timesteps": len(frames),
        "gt_ids": [],
        "tracker_ids": [],
        "similarity_scores": [],
    }

    def index(tracks: Tracks) -> dict[Hashable, int]:
        order = sorted(tracks, key=lambda k: (min(tracks[k]) if tracks[k] else 0, str(k)))
        return {k: i for i, k in enumerate(order) if tracks[k]}

    gt_index, pr_index = index(truth), index(predicted)
    for t in frames:
        g = [(gt_index[k], truth[k][t]) for k in gt_index if t in truth[k]]
        p = [(pr_index[k], predicted[k][t]) for k in pr_index if t in predicted[k]]
        out["gt_ids"].append(np.array([i for i, _ in g], dtype=int))
        out["tracker_ids"].append(np.array([i for i, _ in p], dtype=int))
        out["similarity_scores"].append(
            box_iou_matrix([b for _, b in g], [b for _, b in p]) if g and p else np.zeros((len(g), len(p)))
        )
    out["num_gt_ids"], out["num_tracker_ids"] = len(gt_index), len(pr_index)
    out["num_gt_dets"] = sum(len(x) for x in out["gt_ids"])
    out["num_tracker_dets"] = sum(len(x) for x in out["tracker_ids"])
    return out


def tracking_metrics(truth: Tracks, predicted: Tracks, *, threshold: float = 0.5) -> dict[str, float]:
    """HOTA / CLEAR-MOT / Identity of ``predicted`` against ``truth`` (see the module docstring)."""
    trackeval = _trackeval()
    data = sequence_data(truth, predicted)
    config = {"THRESHOLD": threshold, "PRINT_CONFIG": False}
    with contextlib.redirect_stdout(io.StringIO()):
        hota = trackeval.metrics.HOTA().eval_sequence(data)
        clear = trackeval.metrics.CLEAR(config).eval_sequence(data)
        ident = trackeval.metrics.Identity(config).eval_sequence(data)
    out = {k: float(np.mean(hota[k])) for k in ("HOTA", "DetA", "AssA", "LocA")}
    out.update({k: float(clear[k]) for k in ("MOTA", "MOTP", "IDSW", "CLR_TP", "CLR_FN", "CLR_FP")})
    out["IDF1"] = float(ident["IDF1"])
    return out


def hota(truth: Tracks, predicted: Tracks) -> float:
    """HOTA averaged over the alpha thresholds."""
    return tracking_metrics(truth, predicted)["HOTA"]


def mean_track_iou(truth: Tracks, predicted: Tracks) -> float:
    """Pixelis' "average IoU over tracklets": reference and predicted tracks matched one to one by their
    mean per-frame IoU over the union of their frames (a frame only one side has counts 0); the matched
    scores are summed and divided by the larger number of tracks (an unmatched track scores 0). No track on
    either side scores 1."""
    from ttrl_lightning.fidelity.iou import box_iou, greedy_match

    if not truth and not predicted:
        return 1.0
    if not truth or not predicted:
        return 0.0
    gt, pr = list(truth.values()), list(predicted.values())
    scores = np.zeros((len(gt), len(pr)))
    for i, g in enumerate(gt):
        for j, p in enumerate(pr):
            frames = set(g) | set(p)
            scores[i, j] = sum(box_iou(g[t], p[t]) for t in frames if t in g and t in p) / len(frames)
    return sum(s for _, _, s in greedy_match(scores)) / max(len(gt), len(pr))

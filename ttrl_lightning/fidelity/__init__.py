"""Fidelity metrics of tool outputs, one module per family (Pixelis sec. 3.2.3, "Pixel fidelity and
pseudo-references", and the metrics of sec. 4.1):

* ``iou``: box and mask IoU (``box_iou``, ``box_iou_matrix``, ``mask_iou``, ``greedy_match``);
* ``anls``: Average Normalized Levenshtein Similarity (``anls``, ``anls_score``, ``normalise_text``);
* ``tracking``: HOTA and CLEAR-MOT through TrackEval (``tracking_metrics``, ``hota``), ``mean_track_iou``;
* ``temporal``: temporal IoU and segment F1 (``temporal_iou``, ``frame_segment_iou``, ``segment_f1``);
* ``attributes``: property F1 (``attribute_f1``);
* ``visfid``: per-step scores and the trajectory's VisFid (``STEP_FIDELITY``, ``step_fidelity``, ``visfid``,
  ``group_visfid``: each rollout of a question against the others).
"""

from ttrl_lightning.fidelity.anls import anls, anls_score, levenshtein, normalise_text
from ttrl_lightning.fidelity.attributes import attribute_f1
from ttrl_lightning.fidelity.iou import box_iou, box_iou_matrix, greedy_match, mask_iou
from ttrl_lightning.fidelity.temporal import frame_segment_iou, segment_f1, temporal_iou
from ttrl_lightning.fidelity.tracking import hota, mean_track_iou, tracking_metrics
from ttrl_lightning.fidelity.visfid import STEP_FIDELITY, group_visfid, step_fidelity, visfid

__all__ = [
    "STEP_FIDELITY",
    "anls",
    "anls_score",
    "attribute_f1",
    "box_iou",
    "box_iou_matrix",
    "frame_segment_iou",
    "greedy_match",
    "hota",
    "levenshtein",
    "mask_iou",
    "mean_track_iou",
    "normalise_text",
    "segment_f1",
    "step_fidelity",
    "temporal_iou",
    "tracking_metrics",
    "visfid",
    "group_visfid",
]

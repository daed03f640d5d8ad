"""TRK: initial box or object query + frame range -> per-frame boxes and ids (Pixelis 3.2, "track object").

Detections come from SEG (the active segmenter) in every frame of the range; a maintained ByteTrack
(``supervision``; Kalman motion, two-stage IoU association, no ReID) links them into tracks. Track ids are
renumbered 1, 2, ... by first appearance (frame, then reading order), so the artifact does not depend on the
tracker's global id counter.

``{"query": "red circle"}`` tracks every matching object; ``{"box": [...]}`` tracks the object whose box in
the first frame of the range overlaps it best (IoU >= :data:`MIN_INIT_IOU`, else ``not_found``). Either with
``"frames": [start, end]`` (inclusive; the whole clip when absent) ->
``{"tracks": [{"id": 1, "label": "red circle", "frames": [t, ...], "boxes": [[x0, y0, x1, y1], ...]}]}``.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import numpy as np

from ttrl_lightning.tools.arguments import Arg
from ttrl_lightning.tools.base import TOOLS, Tool, ToolContext, require
from ttrl_lightning.tools.observation import ToolError
from ttrl_lightning.tools.segmenters import Detection, segment
from ttrl_lightning.tools.serialise import box_to_norm, box_to_pixels

#: the least IoU between an initial box and a first-frame detection for TRK to pick that object
MIN_INIT_IOU = 0.3
#: ByteTrack settings (supervision defaults, except a frame rate for short generated clips)
BYTETRACK = {
    "track_activation_threshold": 0.25,
    "lost_track_buffer": 30,
    "minimum_matching_threshold": 0.8,
    "frame_rate": 10,
    "minimum_consecutive_frames": 1,
}


def _pixel_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def bytetrack(per_frame: list[list[Detection]]) -> list[dict[int, Detection]]:
    """Link detections across frames with supervision's ByteTrack: per frame,
    ``{raw track id: detection}``."""
    sv = require("supervision", "supervision")
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", FutureWarning
        )  # ByteTrack is deprecated in supervision in favour of `trackers`
        tracker = sv.ByteTrack(**BYTETRACK)
    out = []
    for dets in per_frame:
        if dets:
            sv_dets = sv.Detections(
                xyxy=np.array([d.box for d in dets], dtype=np.float32),
                confidence=np.array([d.score for d in dets], dtype=np.float32),
                class_id=np.zeros(len(dets), dtype=int),
                data={"index": np.arange(len(dets))},
            )
        else:
            sv_dets = sv.Detections.empty()
            sv_dets.data = {"index": np.zeros(0, dtype=int)}
        tracked = tracker.update_with_detections(sv_dets)
        if len(tracked) == 0:
            out.append({})
            continue
        out.append({int(tid): dets[int(i)] for tid, i in zip(tracked.tracker_id, tracked.data["index"])})
    return out


def run_trk(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    if (args["query"] is None) == (args["box"] is None):
        raise ToolError("bad_arguments", "TRK takes exactly one of query or box")
    start, end = ctx.clip_range(args["frames"])
    frames = ctx.frames[start : end + 1]
    h, w = frames[0].shape[:2]
    query = args["query"] if args["query"] is not None else "objects"
    linked = bytetrack([segment(f, query) for f in frames])
    # renumber by first appearance: frame, then reading order of the detection
    order: dict[int, int] = {}
    for frame_tracks in linked:
        for tid, det in sorted(frame_tracks.items(), key=lambda kv: (kv[1].box[1], kv[1].box[0], kv[0])):
            order.setdefault(tid, len(order) + 1)
    if args["box"] is not None:
        init = box_to_pixels(args["box"], w, h)
        first = linked[0] if linked else {}
        best = max(first.items(), key=lambda kv: (_pixel_iou(init, kv[1].box), -order[kv[0]]), default=None)
        if best is None or _pixel_iou(init, best[1].box) < MIN_INIT_IOU:
            raise ToolError(
                "not_found",
                f"no object in frame {start} overlaps box {args['box']} with IoU >= {MIN_INIT_IOU}",
            )
        keep = {best[0]}
    else:
        keep = set(order)
    tracks = []
    for tid in sorted(keep, key=order.__getitem__):
        steps = [(start + t, ft[tid]) for t, ft in enumerate(linked) if tid in ft]
        label = Counter(d.label for _, d in steps).most_common(1)[0][0]
        tracks.append(
            {
                "boxes": [box_to_norm(d.box, w, h) for _, d in steps],
                "frames": [t for t, _ in steps],
                "id": len(tracks) + 1,
                "label": label,
            }
        )
    return {"tracks": tracks}


TRK = TOOLS.register(
    "TRK",
    Tool(
        name="TRK",
        description="track objects (a query, or the object under an initial box) over a frame range",
        args=(
            Arg("query", "text", doc="object description: track every match"),
            Arg("box", "box", doc="initial box in the first frame of the range: track that object"),
            Arg("frames", "frame_range", doc="[start, end] inclusive; the whole clip when absent"),
        ),
        input="clip",
        run=run_trk,
    ),
)

"""TEMP: query + window -> temporal segments, by proposal scoring and NMS (Pixelis 3.2 / appendix: "proposal
scoring + NMS over windows", scored the UniVTG way with temporal IoU).

1. Evidence per frame ``s_t``: the best SEG score of an object matching the query in frame ``t`` (0 when
   none).
2. Proposals: every inclusive window ``[a, b]`` of the search window with ``b - a + 1 >= min_length``; its
   score is the contrast ``mean(s[a..b]) - mean(s outside [a, b] in the window)`` (0 for the outside of a
   proposal that covers the whole window), computed with prefix sums.
3. Temporal NMS: proposals by descending score (ties: earlier start, then shorter); a proposal is kept when
   its temporal IoU with every kept one is below :data:`NMS_IOU`; the first ``top_k`` kept are returned.
   Only proposals with a positive score count (no evidence anywhere: no segment).

``{"query": "red circle", "window": [s, e]?, "top_k": 1?, "min_length": 1?}`` ->
``{"segments": [{"end": b, "score": c, "start": a}], "window": [s, e]}`` with frame indices (inclusive).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttrl_lightning.tools.arguments import Arg
from ttrl_lightning.tools.base import TOOLS, Tool, ToolContext
from ttrl_lightning.tools.segmenters import segment
from ttrl_lightning.tools.serialise import norm

#: proposals overlapping a kept one at this temporal IoU or more are suppressed
NMS_IOU = 0.5


def frame_iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Temporal IoU of inclusive frame segments ``[a0, a1]`` and ``[b0, b1]`` (frames as unit intervals)."""
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]) + 1)
    return inter / ((a[1] - a[0] + 1) + (b[1] - b[0] + 1) - inter)


def propose(evidence: np.ndarray, min_length: int = 1) -> list[tuple[float, int, int]]:
    """All proposals ``(score, a, b)`` over ``evidence [T]``, sorted best first (see the module docstring)."""
    t = len(evidence)
    prefix = np.concatenate([[0.0], np.cumsum(evidence, dtype=np.float64)])
    total = prefix[-1]
    out = []
    for a in range(t):
        for b in range(a + min_length - 1, t):
            n_in = b - a + 1
            inside = (prefix[b + 1] - prefix[a]) / n_in
            outside = (total - (prefix[b + 1] - prefix[a])) / (t - n_in) if t > n_in else 0.0
            out.append((float(inside - outside), a, b))
    out.sort(key=lambda p: (-round(p[0], 12), p[1], p[2] - p[1]))
    return out


def nms(
    proposals: list[tuple[float, int, int]], top_k: int, iou: float = NMS_IOU
) -> list[tuple[float, int, int]]:
    """Greedy temporal NMS over proposals sorted best first."""
    kept: list[tuple[float, int, int]] = []
    for p in proposals:
        if all(frame_iou((p[1], p[2]), (k[1], k[2])) < iou for k in kept):
            kept.append(p)
            if len(kept) == top_k:
                break
    return kept


def run_temp(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    start, end = ctx.clip_range(args["window"])
    evidence = np.array(
        [
            max((d.score for d in segment(ctx.frames[t], args["query"])), default=0.0)
            for t in range(start, end + 1)
        ]
    )
    min_length = min(args["min_length"], end - start + 1)
    kept = nms([p for p in propose(evidence, min_length) if p[0] > 0], args["top_k"])
    return {
        "segments": [{"end": start + b, "score": norm(score), "start": start + a} for score, a, b in kept],
        "window": [start, end],
    }


TEMP = TOOLS.register(
    "TEMP",
    Tool(
        name="TEMP",
        description="find the frame segments where a queried object is present (proposal scoring + NMS)",
        args=(
            Arg("query", "text", required=True, doc="object description"),
            Arg("window", "frame_range", doc="[start, end] frames searched; the whole clip when absent"),
            Arg("top_k", "int", default=1, low=1, high=5, doc="segments returned after NMS"),
            Arg("min_length", "int", default=1, low=1, doc="shortest proposal in frames"),
        ),
        input="clip",
        run=run_temp,
    ),
)

"""SEG: object query -> masks and boxes (Pixelis 3.2, "segment object at").

``{"query": "red circle", "box": [x0, y0, x1, y1]?, "frame": t?}`` ->
``{"count": n, "objects": [{"box": [...], "label": "red circle", "mask": RLE, "score": s}, ...]}``, objects
sorted top-to-bottom then left-to-right; ``box`` keeps only objects whose centre lies inside it. The pixels
come from the active segmenter (:mod:`~ttrl_lightning.tools.segmenters`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttrl_lightning.tools.arguments import Arg
from ttrl_lightning.tools.base import TOOLS, Tool, ToolContext
from ttrl_lightning.tools.segmenters import Detection, segment
from ttrl_lightning.tools.serialise import box_to_norm, box_to_pixels, mask_to_rle, norm


def detection_artifact(det: Detection, width: int, height: int, *, with_mask: bool = True) -> dict[str, Any]:
    """One detection as written in artifacts: normalised box, label, score and (optionally) the RLE mask."""
    out: dict[str, Any] = {
        "box": box_to_norm(det.box, width, height),
        "label": det.label,
        "score": norm(det.score),
    }
    if with_mask:
        out["mask"] = mask_to_rle(det.mask)
    return out


def inside(det: Detection, region: tuple[int, int, int, int]) -> bool:
    """Whether the centre of ``det``'s box lies in the pixel ``region``."""
    cx, cy = (det.box[0] + det.box[2]) / 2, (det.box[1] + det.box[3]) / 2
    return region[0] <= cx <= region[2] and region[1] <= cy <= region[3]


def run_seg(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    image = ctx.picture(args["frame"], args["view"])
    h, w = image.shape[:2]
    dets = segment(image, args["query"])
    if args["box"] is not None:
        region = box_to_pixels(args["box"], w, h)
        dets = [d for d in dets if inside(d, region)]
    return {"count": len(dets), "objects": [detection_artifact(d, w, h) for d in dets]}


def largest(dets: list[Detection]) -> Detection:
    """The detection with the most pixels (ties: the first in reading order)."""
    return max(dets, key=lambda d: (int(np.count_nonzero(d.mask)), -d.box[1], -d.box[0]))


SEG = TOOLS.register(
    "SEG",
    Tool(
        name="SEG",
        description="segment the objects a query names (colour and / or shape words): masks and boxes",
        args=(
            Arg("query", "text", required=True, doc="object description, e.g. 'red circle' or 'objects'"),
            Arg("box", "box", doc="region hint: keep objects whose centre lies inside"),
            Arg("frame", "int", low=0, doc="frame of the clip to read (the image when absent)"),
            Arg("view", "int", low=0, doc="earlier ZOOM view to read (0 = the first)"),
        ),
        input="image",
        run=run_seg,
    ),
)

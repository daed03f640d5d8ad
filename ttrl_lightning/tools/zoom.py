"""ZOOM / CROP: box -> the crop box and the cropped view (Pixelis 3.2; Pixel Reasoner / DeepEyes crop).

The box is padded by :data:`PADDING` of the image on every side (Pixel Reasoner's crop: padding 0.1 in
normalised coordinates, capped at 600 px, clipped to the image), then each side shorter than
:data:`MIN_SIDE` pixels is widened about its centre to that size (28 px, the smallest crop the Qwen2-VL
patch merger accepts; shifted to stay inside the image, or the whole side when the image is smaller).
``scale`` enlarges the view by nearest-neighbour resampling (deterministic).

``{"box": [...], "scale": 1?, "frame": t?}`` -> artifact ``{"box": crop box, "size": [w, h]}`` and the view
(``[h * scale, w * scale, 3]`` uint8) in ``Observation.view``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttrl_lightning.tools.arguments import Arg
from ttrl_lightning.tools.base import TOOLS, Tool, ToolContext
from ttrl_lightning.tools.observation import ToolError
from ttrl_lightning.tools.serialise import box_to_norm, box_to_pixels

#: padding added on each side, as a share of the image side (Pixel Reasoner: 0.1)
PADDING = 0.1
#: padding never exceeds this many pixels (Pixel Reasoner: 600 / image side)
MAX_PADDING_PX = 600.0
#: the smallest side of a crop in pixels (DeepEyes / Pixel Reasoner: 28)
MIN_SIDE = 28


def _widen(lo: int, hi: int, size: int) -> tuple[int, int]:
    need = min(MIN_SIDE, size)
    if hi - lo >= need:
        return lo, hi
    centre = (lo + hi) / 2
    lo = int(np.floor(centre - need / 2))
    lo = min(max(lo, 0), size - need)
    return lo, lo + need


def crop_box(box: list[float], width: int, height: int) -> tuple[int, int, int, int]:
    """The pixel crop ``(x0, y0, x1, y1)`` of a normalised ``box``: padded, clipped, widened to
    :data:`MIN_SIDE`."""
    px = min(PADDING, MAX_PADDING_PX / width)
    py = min(PADDING, MAX_PADDING_PX / height)
    padded = [max(box[0] - px, 0.0), max(box[1] - py, 0.0), min(box[2] + px, 1.0), min(box[3] + py, 1.0)]
    x0, y0, x1, y1 = box_to_pixels(padded, width, height)
    if x1 <= x0 or y1 <= y0:
        raise ToolError("empty_crop", f"box {box} selects no pixel of the {width}x{height} image")
    x0, x1 = _widen(x0, x1, width)
    y0, y1 = _widen(y0, y1, height)
    return x0, y0, x1, y1


def run_zoom(args: dict[str, Any], ctx: ToolContext) -> tuple[dict[str, Any], np.ndarray]:
    image = ctx.picture(args["frame"], args["view"])
    h, w = image.shape[:2]
    x0, y0, x1, y1 = crop_box(args["box"], w, h)
    view = image[y0:y1, x0:x1]
    scale = args["scale"]
    if scale > 1:
        view = np.repeat(np.repeat(view, scale, axis=0), scale, axis=1)
    view = np.ascontiguousarray(view)
    return {
        "box": box_to_norm((x0, y0, x1, y1), w, h),
        "size": [int(view.shape[1]), int(view.shape[0])],
    }, view


ZOOM = TOOLS.register(
    "ZOOM",
    Tool(
        name="ZOOM",
        description="crop a box (padded, at least 28 px a side) and return the enlarged view",
        args=(
            Arg("box", "box", required=True, doc="[x0, y0, x1, y1] normalised"),
            Arg("scale", "int", default=1, low=1, high=4, doc="nearest-neighbour enlargement of the view"),
            Arg("frame", "int", low=0, doc="frame of the clip to read (the image when absent)"),
            Arg("view", "int", low=0, doc="earlier ZOOM view to read (0 = the first)"),
        ),
        input="image",
        run=run_zoom,
    ),
)

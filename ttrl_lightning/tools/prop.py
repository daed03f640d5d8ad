"""PROP: object -> colour, size and shape (Pixelis 3.2, "get properties").

``{"query": "circle"}`` (the largest matching object) or ``{"box": [...]}`` (the object with the most pixels
inside the box), plus ``"frame"`` in a clip -> ``{"box", "colour", "shape", "size", "area"}``; ``size`` is
the bucket of ``tools.palette.SIZES`` by ``area``, the share of the image the object covers (4 decimals:
a share, not a coordinate).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttrl_lightning.tools.arguments import Arg
from ttrl_lightning.tools.base import TOOLS, Tool, ToolContext
from ttrl_lightning.tools.observation import ToolError
from ttrl_lightning.tools.palette import size_name
from ttrl_lightning.tools.seg import largest
from ttrl_lightning.tools.segmenters import colour_name, segment
from ttrl_lightning.tools.serialise import box_to_norm, box_to_pixels


def run_prop(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    if (args["query"] is None) == (args["box"] is None):
        raise ToolError("bad_arguments", "PROP takes exactly one of query or box")
    image = ctx.picture(args["frame"], args["view"])
    h, w = image.shape[:2]
    if args["query"] is not None:
        dets = segment(image, args["query"])
        if not dets:
            raise ToolError("not_found", f"no object matches {args['query']!r}")
        det = largest(dets)
    else:
        x0, y0, x1, y1 = box_to_pixels(args["box"], w, h)
        scored = [(int(np.count_nonzero(d.mask[y0:y1, x0:x1])), d) for d in segment(image, "objects")]
        scored = [(n, d) for n, d in scored if n > 0]
        if not scored:
            raise ToolError("not_found", f"no object inside box {args['box']}")
        det = max(scored, key=lambda nd: (nd[0], -nd[1].box[1], -nd[1].box[0]))[1]
    area = float(np.count_nonzero(det.mask)) / (w * h)
    return {
        "area": round(area, 4) + 0.0,
        "box": box_to_norm(det.box, w, h),
        "colour": colour_name(image[det.mask].mean(axis=0)),
        "shape": det.shape,
        "size": size_name(area),
    }


PROP = TOOLS.register(
    "PROP",
    Tool(
        name="PROP",
        description="colour, shape and size of one object (named by a query or a box)",
        args=(
            Arg("query", "text", doc="object description; the largest match is described"),
            Arg("box", "box", doc="[x0, y0, x1, y1]: the object with the most pixels inside"),
            Arg("frame", "int", low=0, doc="frame of the clip to read (the image when absent)"),
            Arg("view", "int", low=0, doc="earlier ZOOM view to read (0 = the first)"),
        ),
        input="image",
        run=run_prop,
    ),
)

"""OCR / READ: optional box -> text and spans (Pixelis 3.2, "read text"; PP-OCR through rapidocr-onnxruntime).

``{"box": [...]?, "frame": t?}`` -> ``{"text": "RIVER 42", "spans": [{"box": [...], "score": s, "text":
"RIVER"}, ...]}``. The whole image is read when ``box`` is absent; a box is cropped (no padding of the
region, a replicated border of :data:`BORDER` px so the detector sees text at the edge) and span boxes are
given in the coordinates of the whole image. Text is NFKC-normalised; spans are in reading order (top to
bottom by line, then left to right) and ``text`` joins them with single spaces.

The backend is PP-OCR (DB detection, CRNN recognition) whose ONNX models ship inside the
``rapidocr-onnxruntime`` wheel: no download at run time. It is loaded once per process.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any

import numpy as np

from ttrl_lightning.tools.arguments import Arg
from ttrl_lightning.tools.base import TOOLS, Tool, ToolContext, require
from ttrl_lightning.tools.serialise import box_to_norm, box_to_pixels, norm

#: pixels of replicated border added around the region read
BORDER = 16


@functools.lru_cache(maxsize=1)
def engine():
    """The PP-OCR engine (loaded once)."""
    module = require("rapidocr_onnxruntime", "rapidocr-onnxruntime")
    return module.RapidOCR()


def read_text(image: np.ndarray) -> list[tuple[tuple[float, float, float, float], str, float]]:
    """Run PP-OCR on ``image [H, W, 3]`` uint8 RGB: ``[(pixel box, NFKC text, score), ...]`` unordered."""
    cv2 = require("cv2", "opencv-python-headless")
    padded = cv2.copyMakeBorder(
        np.ascontiguousarray(image), BORDER, BORDER, BORDER, BORDER, cv2.BORDER_REPLICATE
    )
    # rapidocr takes arrays in OpenCV's BGR order
    result, _ = engine()(np.ascontiguousarray(padded[:, :, ::-1]))
    out = []
    for quad, text, score in result or []:
        pts = np.asarray(quad, dtype=np.float64) - BORDER
        text = unicodedata.normalize("NFKC", str(text)).strip()
        if text:
            out.append(
                ((pts[:, 0].min(), pts[:, 1].min(), pts[:, 0].max(), pts[:, 1].max()), text, float(score))
            )
    return out


def reading_order(spans: list[tuple[tuple[float, float, float, float], str, float]]):
    """Sort spans top to bottom by line (a span starts a new line when its top is below the previous span's
    vertical centre), left to right within a line."""
    spans = sorted(spans, key=lambda s: (s[0][1], s[0][0]))
    lines: list[list] = []
    for span in spans:
        if lines and span[0][1] <= (lines[-1][0][0][1] + lines[-1][0][0][3]) / 2:
            lines[-1].append(span)
        else:
            lines.append([span])
    return [s for line in lines for s in sorted(line, key=lambda s: (s[0][0], s[0][1]))]


def run_ocr(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    image = ctx.picture(args["frame"], args["view"])
    h, w = image.shape[:2]
    x0, y0, x1, y1 = (0, 0, w, h) if args["box"] is None else box_to_pixels(args["box"], w, h)
    spans = []
    for (bx0, by0, bx1, by1), text, score in reading_order(read_text(image[y0:y1, x0:x1])):
        box = (
            min(max(bx0 + x0, x0), x1),
            min(max(by0 + y0, y0), y1),
            min(max(bx1 + x0, x0), x1),
            min(max(by1 + y0, y0), y1),
        )
        spans.append({"box": box_to_norm(box, w, h), "score": norm(score), "text": text})
    return {"spans": spans, "text": " ".join(s["text"] for s in spans)}


OCR = TOOLS.register(
    "OCR",
    Tool(
        name="OCR",
        description="read the text in a box (the whole image when absent): text and spans",
        args=(
            Arg("box", "box", doc="[x0, y0, x1, y1] region to read"),
            Arg("frame", "int", low=0, doc="frame of the clip to read (the image when absent)"),
            Arg("view", "int", low=0, doc="earlier ZOOM view to read (0 = the first)"),
        ),
        input="image",
        run=run_ocr,
    ),
)

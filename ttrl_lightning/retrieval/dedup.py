"""Leakage control at ingest: near-duplicate detection and the evaluation whitelist (Pixelis appendix 11).

Two stages, in the paper's order ("Near-duplicate detection", "Thresholds and priorities"):

1. perceptual hash: the 64-bit pHash (``imagehash.phash``, DCT of the 32 x 32 grey image, 8 x 8 low
   frequencies against their median); a pair with Hamming distance ``d_H <= 8`` is a near-duplicate and is
   removed without an embedding check;
2. embedding: cosine ``s = <f(x), f(y)>`` of L2-normalised image embeddings; ``s >= 0.93`` is a
   near-duplicate.

The paper's SSIM tie-breaker for "template overlap" (same background, different foreground) is not
implemented: every embedding-stage positive is removed.

:class:`LeakageGuard` applies both to an :class:`~ttrl_lightning.retrieval.index.ExemplarIndex`:

* evaluation media are registered first (:meth:`LeakageGuard.register_evaluation`): their ids join the
  index's whitelist and their hashes / embeddings the reference set, so an item that is a near-duplicate
  of an evaluation item is refused at ingest (put on the blocklist) and never receives a code;
* among training items the earliest ingest wins: a later near-duplicate goes on the blocklist, which every
  later add consults.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
from typing import Sequence

import numpy as np

from ..errors import UserError
from ..safe_files import atomic_write
from . import _optional
from .index import ExemplarIndex, normalise_rows

#: Paper thresholds: pHash Hamming distance and embedding cosine (images).
PHASH_HAMMING, EMBEDDING_COSINE = 8, 0.93


def as_pil(image):
    """A PIL RGB image from a PIL image or an ``[H, W, 3]`` (or ``[H, W]``) uint8 array."""
    Image = _optional.require("PIL.Image", "pillow")
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] != 3):
        raise UserError(f"an image must be a PIL image or an [H, W, 3] uint8 array, got {array.dtype} "
                        f"{list(array.shape)}")
    return Image.fromarray(array).convert("RGB")


def phash(image) -> int:
    """64-bit perceptual hash of an image (``imagehash.phash``, hash size 8) as an unsigned integer."""
    imagehash = _optional.require("imagehash")
    bits = imagehash.phash(as_pil(image), hash_size=8).hash.reshape(-1)
    return int("".join("1" if b else "0" for b in bits), 2)


def hamming(a: int, b: np.ndarray | int) -> np.ndarray:
    """Hamming distance between 64-bit hash ``a`` and each of ``b`` (uint64)."""
    return np.bitwise_count(np.bitwise_xor(np.uint64(a), np.asarray(b, dtype=np.uint64))).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Duplicate:
    """``item`` is a near-duplicate of the earlier ``of``, found by ``stage`` (``"phash"`` or
    ``"embedding"``) with ``distance`` (Hamming bits) or ``cosine``; ``evaluation`` when ``of`` is an
    evaluation item."""

    item: str
    of: str
    stage: str
    value: float
    evaluation: bool = False


class NearDuplicateFilter:
    """The kept items' pHashes and unit embeddings, in ingest order; :meth:`find` the earliest match."""

    def __init__(self, dim: int, hamming_max: int = PHASH_HAMMING, cosine_min: float = EMBEDDING_COSINE):
        if not 0 <= hamming_max <= 64:
            raise UserError(f"hamming_max must be in [0, 64], got {hamming_max!r}")
        if not -1.0 <= cosine_min <= 1.0:
            raise UserError(f"cosine_min must be in [-1, 1], got {cosine_min!r}")
        self.dim, self.hamming_max, self.cosine_min = int(dim), int(hamming_max), float(cosine_min)
        self.ids: list[str] = []
        self.evaluation: list[bool] = []
        self.hashes = np.empty(0, dtype=np.uint64)
        self.embeddings = np.empty((0, self.dim), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    def find(self, item: str, image_hash: int, embedding: np.ndarray) -> Duplicate | None:
        """The earliest kept item that ``(image_hash, embedding)`` duplicates: pHash first (any
        ``d_H <= hamming_max``), then embedding cosine ``>= cosine_min``; None when there is none."""
        if not self.ids:
            return None
        distance = hamming(image_hash, self.hashes)
        hit = np.nonzero(distance <= self.hamming_max)[0]
        if hit.size:
            j = int(hit[0])
            return Duplicate(item, self.ids[j], "phash", float(distance[j]), self.evaluation[j])
        cosine = self.embeddings @ normalise_rows(embedding, self.dim, "embedding")[0]
        hit = np.nonzero(cosine >= self.cosine_min)[0]
        if hit.size:
            j = int(hit[0])
            return Duplicate(item, self.ids[j], "embedding", float(cosine[j]), self.evaluation[j])
        return None

    def keep(self, item: str, image_hash: int, embedding: np.ndarray, evaluation: bool = False) -> None:
        self.ids.append(item)
        self.evaluation.append(bool(evaluation))
        self.hashes = np.append(self.hashes, np.uint64(image_hash))
        self.embeddings = np.vstack([self.embeddings, normalise_rows(embedding, self.dim, "embedding")])

    def save(self, path: str | os.PathLike) -> None:
        """Write the reference set (ids, hashes, embeddings, thresholds) atomically to one ``.npz`` file."""
        meta = {"dim": self.dim, "hamming_max": self.hamming_max, "cosine_min": self.cosine_min,
                "ids": self.ids, "evaluation": self.evaluation}
        buffer = io.BytesIO()
        np.savez(buffer, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), hashes=self.hashes,
                 embeddings=self.embeddings)
        with atomic_write(path, "wb") as fh:
            fh.write(buffer.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "NearDuplicateFilter":
        try:
            with np.load(os.fspath(path), allow_pickle=False) as data:
                meta = json.loads(data["meta"].tobytes())
                hashes, embeddings = data["hashes"], data["embeddings"]
            out = cls(meta["dim"], meta["hamming_max"], meta["cosine_min"])
            if hashes.shape != (len(meta["ids"]),) or embeddings.shape != (len(meta["ids"]), meta["dim"]):
                raise ValueError("arrays do not match the ids")
        except (ValueError, KeyError, OSError, EOFError) as error:
            if isinstance(error, (FileNotFoundError, IsADirectoryError, PermissionError)):
                raise
            raise UserError(f"{os.fspath(path)}: not a near-duplicate filter file or corrupt "
                            f"({error})") from None
        out.ids, out.evaluation = list(meta["ids"]), list(meta["evaluation"])
        out.hashes, out.embeddings = hashes.astype(np.uint64), embeddings.astype(np.float32)
        return out


@dataclasses.dataclass
class IngestReport:
    """Outcome of :meth:`LeakageGuard.ingest`: ``added`` ids; ``whitelisted`` (evaluation ids) and
    ``blocked`` (already on the blocklist) refused; ``duplicates`` found now (each one is blocklisted)."""

    added: list[str] = dataclasses.field(default_factory=list)
    whitelisted: list[str] = dataclasses.field(default_factory=list)
    blocked: list[str] = dataclasses.field(default_factory=list)
    duplicates: list[Duplicate] = dataclasses.field(default_factory=list)


class LeakageGuard:
    """Whitelist + two-stage near-duplicate filter in front of an :class:`ExemplarIndex`.

    Args:
        index: the index items are added to (its whitelist and blocklist are the ones enforced).
        embedding_dim: dimension of the image embeddings of stage 2.
        hamming_max, cosine_min: the thresholds (paper: 8 and 0.93).
    """

    def __init__(self, index: ExemplarIndex, embedding_dim: int, hamming_max: int = PHASH_HAMMING,
                 cosine_min: float = EMBEDDING_COSINE, near_duplicates: NearDuplicateFilter | None = None):
        self.index = index
        self.filter = near_duplicates or NearDuplicateFilter(embedding_dim, hamming_max, cosine_min)

    def register_evaluation(self, ids: Sequence[str], images: Sequence, embeddings) -> None:
        """Whitelist evaluation items and remember their media, so near-duplicates of them are refused."""
        emb = normalise_rows(embeddings, self.filter.dim, "evaluation embeddings")
        if not len(ids) == len(images) == emb.shape[0]:
            raise UserError(f"register_evaluation: {len(ids)} ids, {len(images)} images, "
                            f"{emb.shape[0]} embeddings")
        self.index.extend_whitelist(ids)
        for item, image, e in zip(ids, images, emb):
            self.filter.keep(item, phash(image), e, evaluation=True)

    def ingest(self, ids: Sequence[str], keys, images: Sequence, embeddings) -> IngestReport:
        """Add items in order unless whitelisted, blocklisted, or a near-duplicate of an evaluation item or of
        an earlier kept item (then blocklisted). ``keys``: the retrieval keys ``[n, index.dim]``;
        ``images`` and ``embeddings`` ``[n, embedding_dim]``: the media and their image embeddings."""
        ids = list(ids)
        empty = np.empty((0, self.index.dim), np.float32)
        keys = normalise_rows(keys, self.index.dim, "keys") if ids else empty
        emb = normalise_rows(embeddings, self.filter.dim, "embeddings") if ids else keys[:, :0]
        if not len(ids) == len(images) == keys.shape[0] == emb.shape[0]:
            raise UserError(f"ingest: {len(ids)} ids, {len(images)} images, {keys.shape[0]} keys, "
                            f"{emb.shape[0]} embeddings")
        report = IngestReport()
        accepted: list[int] = []
        for row, item in enumerate(ids):
            reason = self.index.refused(item)
            if reason == "whitelisted":
                report.whitelisted.append(item)
                continue
            if reason == "blocked":
                report.blocked.append(item)
                continue
            if item in self.index.ids or item in self.filter.ids:
                raise UserError(f"ingest: id {item!r} was ingested before")
            image_hash = phash(images[row])
            duplicate = self.filter.find(item, image_hash, emb[row])
            if duplicate is not None:
                report.duplicates.append(duplicate)
                self.index.block([item])
                continue
            self.filter.keep(item, image_hash, emb[row])
            accepted.append(row)
        if accepted:
            added = self.index.add([ids[r] for r in accepted], keys[accepted])
            report.added.extend(added.added)
        return report

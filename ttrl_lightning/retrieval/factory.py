"""Which faiss index an :class:`~ttrl_lightning.retrieval.index.ExemplarIndex` builds, and its memory formula.

Pixelis appendix 3 ("OPQ + IVF-PQ index"): an OPQ rotation, an inverted file of ``n_list = 4096`` coarse
centroids (k-means, 20 iterations) and a product quantiser of ``m = 64`` sub-vectors of ``b = 8`` bits (a
64-byte code per vector); search probes ``n_probe = 32`` lists and the top 256 candidates are re-ranked by
exact cosine. The text-only ablation uses HNSW (``M = 32``, ``efSearch = 128``).

``factory`` names accepted by the index:

* ``"auto"`` -- the paper's ``OPQ64,IVF4096,PQ64``, scaled to the corpus it is trained on
  (:func:`auto_factory`): exact ``Flat`` search below :data:`MIN_PQ_TRAIN` vectors (a PQ codebook of 256
  centroids needs about 39 x 256 training points), otherwise ``n_list`` the largest power of two <= n / 39
  (at most 4096) and ``m`` the largest divisor of ``dim`` <= min(64, dim / 4) (sub-vectors of at least 4
  values: faiss trains 1-value sub-quantisers very slowly and they compress nothing); a scaled choice is
  logged;
* ``"hnsw"`` -- ``HNSW32`` searched with ``efSearch = 128``;
* any faiss index-factory string (``"OPQ32,IVF1024,PQ32"``, ``"IVF256,Flat"``, ``"HNSW16"``, ``"Flat"``).
"""
from __future__ import annotations

import logging
import re

from ..errors import UserError

logger = logging.getLogger(__name__)

#: The paper's index (Pixelis appendix 3).
PAPER_FACTORY = "OPQ64,IVF4096,PQ64"
#: HNSW ablation (Pixelis appendix 3, "Fallback and ablations").
HNSW_FACTORY = "HNSW32"
#: Search-time settings of the paper.
DEFAULT_NPROBE, DEFAULT_EF_SEARCH, DEFAULT_RERANK = 32, 128, 256
#: k-means iterations of the coarse quantiser (paper: 20).
KMEANS_ITERATIONS = 20
#: faiss asks for at least 39 training points per centroid.
MIN_POINTS_PER_CENTROID = 39
#: Fewest training vectors for an 8-bit product quantiser (39 x 256); below it "auto" is exact search.
MIN_PQ_TRAIN = MIN_POINTS_PER_CENTROID * 256
#: Training vectors drawn per coarse centroid (faiss' own cap is 256; 64 keeps 1M-key training in minutes).
TRAIN_POINTS_PER_CENTROID = 64

_IVF = re.compile(r"IVF(\d+)")
_PQ = re.compile(r"(?<!O)PQ(\d+)(?:x(\d+))?")


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def auto_factory(dim: int, n_train: int) -> str:
    """The paper's ``OPQ64,IVF4096,PQ64`` scaled to ``n_train`` training vectors of dimension ``dim``.

    ``Flat`` when ``n_train < MIN_PQ_TRAIN``; else ``OPQ{m},IVF{n_list},PQ{m}`` with ``n_list`` the largest
    power of two <= ``n_train / 39`` capped at 4096 and ``m`` the largest divisor of ``dim`` <= 64 that
    leaves sub-vectors of at least 4 values (``Flat`` when ``dim < 4``).
    """
    if n_train < MIN_PQ_TRAIN or dim < 4:
        return "Flat"
    n_list = 1 << (n_train // MIN_POINTS_PER_CENTROID).bit_length() - 1
    n_list = min(4096, n_list)
    m = _largest_divisor_at_most(dim, min(64, dim // 4))
    return f"OPQ{m},IVF{n_list},PQ{m}"


def resolve_factory(factory: str, dim: int, n_train: int) -> str:
    """The faiss factory string that ``factory`` (``"auto"``, ``"hnsw"`` or a factory string) means for a
    corpus of ``n_train`` vectors; logs a notice when ``"auto"`` differs from the paper's index."""
    if not isinstance(factory, str) or not factory.strip():
        raise UserError(f"factory must be 'auto', 'hnsw' or a faiss index-factory string, got {factory!r}")
    name = factory.strip()
    if name.lower() == "hnsw":
        return HNSW_FACTORY
    if name.lower() != "auto":
        return name
    chosen = auto_factory(dim, n_train)
    if chosen != PAPER_FACTORY:
        logger.warning("notice: index factory 'auto' -> %r for %d training vectors of dim %d (the paper's %r "
                       "needs >= %d vectors and dim divisible by 64)", chosen, n_train, dim, PAPER_FACTORY,
                       4096 * MIN_POINTS_PER_CENTROID, )
    return chosen


def factory_lists(factory: str) -> int | None:
    """``n_list`` of an IVF factory string (``"OPQ64,IVF4096,PQ64"`` -> 4096), else None."""
    match = _IVF.search(factory)
    return int(match.group(1)) if match else None


def ivfpq_memory_bytes(n: int, dim: int, n_list: int, m: int, nbits: int = 8, id_bytes: int = 8,
                       opq: bool = True) -> dict[str, int]:
    """Memory of an (OPQ +) IVF-PQ index by the paper's formula (Pixelis appendix 3, "Scale and memory"):

        memory ~= N * code + N * id + n_list * centroid + OPQ parameters

    with ``code = m * nbits / 8`` bytes, ``id`` = ``id_bytes`` (faiss stores int64 list ids), a float32
    centroid of ``dim`` values per list, the ``dim x dim`` float32 OPQ rotation, plus the PQ codebooks
    (``2^nbits x dim`` float32, which the paper's formula leaves out). Returns each term and ``total``.
    """
    terms = {
        "codes": n * (m * nbits // 8),
        "ids": n * id_bytes,
        "centroids": n_list * dim * 4,
        "opq": dim * dim * 4 if opq else 0,
        "pq_codebooks": (1 << nbits) * dim * 4,
    }
    terms["total"] = sum(terms.values())
    return terms

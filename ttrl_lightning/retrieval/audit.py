"""Leakage audit of an index (Pixelis appendix 11, "Audit procedure"): probe random queries and assert that
no whitelisted or blocked item appears in any top-K.

Probes (seeded): half are random unit directions (Gaussian), half are stored keys (active and deactivated
items alike, the strongest probes for an item that should not come back) with a little Gaussian noise. An
offender is a returned id that is on the index's whitelist or blocklist, on an extra evaluation list given
by the caller, or not searchable; any offender fails the audit.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

from ..errors import UserError
from .index import ExemplarIndex


@dataclasses.dataclass
class AuditReport:
    """``probes`` queries of top-``k``; ``offenders``: ``(probe, id, reason)`` for every forbidden hit."""

    probes: int
    k: int
    items: int
    offenders: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.offenders


def audit_index(index: ExemplarIndex, probes: int = 10_000, k: int = 8, seed: int = 0,
                evaluation_ids: Iterable[str] = (), noise: float = 0.05, batch: int = 1024) -> AuditReport:
    """Search ``probes`` random queries (top ``k``) and list every whitelisted / blocked / evaluation /
    inactive id returned."""
    if probes < 1 or k < 1:
        raise UserError(f"probes and k must be >= 1, got {probes} and {k}")
    extra = set(evaluation_ids)
    rng = np.random.default_rng(seed)
    stored = index.vectors
    n_stored = probes // 2 if len(stored) else 0
    report = AuditReport(probes=probes, k=k, items=len(index))
    for start in range(0, probes, batch):  # drawn batch by batch: memory O(batch x dim), whatever probes is
        queries = rng.standard_normal((min(batch, probes - start), index.dim)).astype(np.float32)
        near = min(max(n_stored - start, 0), len(queries))  # the first n_stored probes: near stored keys
        if near:
            rows = rng.integers(0, len(stored), near)
            queries[:near] = stored[rows] + noise * queries[:near] / np.sqrt(index.dim)
        for offset, hits in enumerate(index.search(queries, k)):
            for item, _ in hits:
                reason = index.refused(item) or ("evaluation" if item in extra else None) \
                    or (None if item in index else "inactive")
                if reason:
                    report.offenders.append((start + offset, item, reason))
    return report

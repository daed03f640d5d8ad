"""What Pixel TTRL takes from a query's retrieved neighbourhood: its value, the EMA baseline, and VisFid.

Pixelis supp. S6 ("Neighborhood value and baseline"):

    v_bar(N(q)) = (1 / |N(q)|) sum_{h in N(q)} v(h)          (stop-gradient; v(h) the neighbour's summary)
    b(q)        = EMA_rho(v_bar(N(q))),  rho = 0.99           (query-level baseline, constant in the gradient)
    A(tau_j, q) = v_bar(N(q)) * [r(tau_j) - b(q)]

Pixelis 4.4 ("Pixel-grounded retrieval"): VisFid is "the fraction of retrieved exemplars whose evidence
matches the query footprint". Our reading (:func:`neighbour_visual_fidelity`): a neighbour matches when one
of its decisive footprints matches one of the query's footprints of the same kind with a score >=
``threshold`` (0.5), the score being IoU for boxes and masks and ANLS's per-pair similarity for text
(1 - normalised Levenshtein distance, 0 below 0.5). The scorer is pluggable (``match``), so the tools'
fidelity metrics replace the built-in ones where they exist.

Neutral values: without an index (or with an empty neighbourhood, or a query without pixel evidence) these
functions return None; :data:`NEUTRAL_VALUE` (1: the advantage is unscaled), :data:`NEUTRAL_BASELINE` (0)
and :data:`NEUTRAL_VISFID` (1: the voting weight is unchanged) are what a caller uses then, and logs.
"""
from __future__ import annotations

import math
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np

from ..errors import UserError
from ..fidelity.anls import anls_score
from ..fidelity.iou import box_iou
from ..fidelity.iou import mask_iou as _mask_iou

#: Used in place of a missing neighbourhood value / baseline / VisFid (no index, empty neighbourhood).
NEUTRAL_VALUE, NEUTRAL_BASELINE, NEUTRAL_VISFID = 1.0, 0.0, 1.0
#: EMA rate of the baseline (Pixelis: rho = 0.99) and the default match threshold of VisFid.
BASELINE_RHO, VISFID_THRESHOLD = 0.99, 0.5


def neighbourhood_value(values: Sequence[float]) -> float | None:
    """``v_bar(N(q))``: the mean of the neighbours' values ``v(h)`` (e.g. their curiosity + coherence
    summaries, or their rewards); None for an empty neighbourhood (then use :data:`NEUTRAL_VALUE`).
    Refuses NaN / inf (naming the position)."""
    v = np.asarray(list(values), dtype=np.float64)
    if v.ndim != 1:
        raise UserError(f"neighbour values must be a flat list of numbers, got shape {list(v.shape)}")
    if v.size == 0:
        return None
    bad = np.nonzero(~np.isfinite(v))[0]
    if bad.size:
        raise UserError(f"neighbour value {int(bad[0])} is {v[bad[0]]} (must be finite)")
    return float(v.mean())


class NeighbourhoodBaseline:
    """``b(q) = EMA_rho(v_bar(N(q)))`` per query: ``update(q, v_bar)`` returns the baseline after this
    visit, ``b <- rho b + (1 - rho) v_bar``, starting at the first ``v_bar`` seen for ``q``. A ``v_bar`` of
    None (no neighbourhood) leaves ``b(q)`` unchanged (:data:`NEUTRAL_BASELINE` before any value)."""

    def __init__(self, rho: float = BASELINE_RHO):
        if not 0.0 <= float(rho) < 1.0:
            raise UserError(f"rho must be in [0, 1), got {rho!r}")
        self.rho = float(rho)
        self.values: dict[Hashable, float] = {}

    def __getitem__(self, query: Hashable) -> float:
        return self.values.get(query, NEUTRAL_BASELINE)

    def update(self, query: Hashable, value: float | None) -> float:
        if value is None:
            return self[query]
        if not math.isfinite(value):
            raise UserError(f"neighbourhood value of query {query!r} is {value}")
        old = self.values.get(query)
        self.values[query] = float(value) if old is None else self.rho * old + (1.0 - self.rho) * float(value)
        return self.values[query]

    def state_dict(self) -> dict:
        return {"rho": self.rho, "values": dict(self.values)}

    def load_state_dict(self, state: Mapping) -> None:
        self.rho, self.values = float(state["rho"]), dict(state["values"])


def neighbourhood_advantages(rewards: Sequence[float], value: float | None, baseline: float | None
                             ) -> np.ndarray:
    """``A_j = v_bar * (r_j - b)`` for one query's rollouts; None value / baseline -> the neutral ones
    (then ``A_j = r_j``)."""
    r = np.asarray(list(rewards), dtype=np.float64)
    v = NEUTRAL_VALUE if value is None else float(value)
    b = NEUTRAL_BASELINE if baseline is None else float(baseline)
    return v * (r - b)


# --- evidence matching --------------------------------------------------------------------------------------

def mask_iou(a, b) -> float:
    """IoU of two masks (``fidelity.mask_iou``); masks of different sizes do not match (0)."""
    try:
        return _mask_iou(a, b)
    except ValueError:
        return 0.0


def text_similarity(a: str, b: str, tau: float = 0.5) -> float:
    """ANLS's per-pair term (``fidelity.anls_score``): ``1 - NL(a, b)`` when the normalised Levenshtein distance
    ``NL < tau``, else 0 (NFKC, case-insensitive, whitespace collapsed)."""
    return anls_score(a, b, tau=tau)


def evidence_similarity(a: Mapping, b: Mapping) -> float:
    """Similarity of two footprints (dicts with one of ``box``, ``mask``, ``text``, and optionally
    ``tool``): IoU of boxes / masks, ANLS's term for text; 0 when their kinds or tools differ."""
    if a.get("tool") != b.get("tool"):
        return 0.0
    if "box" in a and "box" in b:
        return box_iou(a["box"], b["box"])
    if "mask" in a and "mask" in b:
        return mask_iou(a["mask"], b["mask"])
    if "text" in a and "text" in b:
        return text_similarity(str(a["text"]), str(b["text"]))
    return 0.0


def neighbour_visual_fidelity(query_evidence: Sequence[Mapping],
                              neighbour_evidence: Sequence[Sequence[Mapping]],
                              match: Callable[[Mapping, Mapping], float] = evidence_similarity,
                              threshold: float = VISFID_THRESHOLD) -> float | None:
    """VisFid of a query: the fraction of its retrieved neighbours whose evidence matches the query's.

    ``query_evidence``: the query's decisive footprints (dicts, see :func:`evidence_similarity`);
    ``neighbour_evidence[i]``: neighbour i's footprints. Neighbour i matches when
    ``max_{a in query, b in neighbour i} match(a, b) >= threshold``. Returns None (use
    :data:`NEUTRAL_VISFID`) when there are no neighbours or the query has no footprint.
    """
    if not 0.0 <= float(threshold) <= 1.0:
        raise UserError(f"threshold must be in [0, 1], got {threshold!r}")
    if not neighbour_evidence or not query_evidence:
        return None
    hits = 0
    for footprints in neighbour_evidence:
        best = max((match(a, b) for a in query_evidence for b in footprints), default=0.0)
        hits += best >= threshold
    return hits / len(neighbour_evidence)

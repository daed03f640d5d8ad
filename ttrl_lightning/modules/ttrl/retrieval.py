"""Pixel TTRL's per-query baseline from retrieved neighbours (Pixelis supp. S6, "Neighborhood value and
baseline", and its pseudo-code step 6).

For each accepted question ``q`` of a step:

    N(q)        = the k nearest exemplars of q's key in the ExemplarIndex (q's own exemplar left out)
    v_bar(N(q)) = mean of the neighbours' values v(h)                       (retrieval.neighbourhood_value)
    b(q)        = EMA_rho(v_bar(N(q)))  per query, rho = 0.99               (retrieval.NeighbourhoodBaseline)
    A_j         = v_bar(N(q)) * [r_j - b(q)]                                (retrieval.neighbourhood_advantages)

then, as the global rule does, A is divided by its standard deviation over the batch's accepted rows (the
appendix's practical note ii). Readings where the paper is silent:

* a question's **key** is the policy's final hidden state averaged over the prompt's tokens (no gradient),
  L2-normalised: the text stand-in for the paper's pixel + semantic keys;
* an exemplar's **value** ``v(h)`` is the mean reward of its trained rows when it was accepted, so v_bar and
  b(q) live on the reward's scale;
* a question whose neighbourhood is empty (the first steps, an empty index) falls back to the global EMA
  baseline of ``TTRLModule.ema_baseline_advantages`` with v_bar = 1;
* every accepted question is appended as an exemplar under its id (append-only: a revisit updates its value,
  never its key); ids on the index's whitelist (evaluation items) are refused by the index itself;
* the neighbours' evidence does not reach VisFid: text exemplars carry no pixel footprint.

The index is saved to its file at every checkpoint together with the number of exemplars it held, so a resume
drops exemplars appended after that checkpoint and continues from the same neighbourhoods.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch

from ttrl_lightning.errors import UserError
from ttrl_lightning.retrieval.index import ExemplarIndex
from ttrl_lightning.retrieval.neighbourhood import BASELINE_RHO, NeighbourhoodBaseline, neighbourhood_value

__all__ = ["QueryNeighbourhoods", "RETRIEVAL_OPTIONS", "checked_retrieval_options", "prompt_keys"]

#: ``AdvantageSpec(retrieval={...})`` options and their defaults (``index`` is required)
RETRIEVAL_OPTIONS = {"index": None, "k": 8, "rho": BASELINE_RHO, "whitelist": ()}


def checked_retrieval_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the defaults filled in; an unknown option, a missing index path, a bad ``k`` or ``rho``
    is a ``UserError`` naming it (``TTRLModule`` checks them when it is built)."""
    unknown = sorted(set(options) - set(RETRIEVAL_OPTIONS))
    if unknown:
        raise UserError(f"advantage.retrieval: unknown option(s) {unknown}; known: "
                        f"{', '.join(RETRIEVAL_OPTIONS)}")
    o = {**RETRIEVAL_OPTIONS, **options}
    if not isinstance(o["index"], str) or not o["index"]:
        raise UserError(f"advantage.retrieval.index must be the index file's path, got {o['index']!r}")
    if isinstance(o["k"], bool) or not isinstance(o["k"], int) or o["k"] < 1:
        raise UserError(f"advantage.retrieval.k must be an integer >= 1, got {o['k']!r}")
    NeighbourhoodBaseline(o["rho"])  # its rho check
    return o


@torch.no_grad()
def prompt_keys(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> np.ndarray:
    """[P, d] float32 unit keys: the final hidden state averaged over each prompt's real tokens."""
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, output_hidden_states=True)
    hidden = out.hidden_states[-1].float()
    mask = prompt_mask.to(hidden.dtype)[..., None]
    mean = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1)
    return torch.nn.functional.normalize(mean, dim=-1).cpu().numpy()


class QueryNeighbourhoods:
    """The exemplar index of one run, the exemplars' values and the per-query baselines (module docstring).

    ``options``: ``index`` (the index file; loaded when it exists, else created empty and written at the
    first checkpoint), ``k`` neighbours (Pixelis: 8), ``rho`` of b(q) (0.99), ``whitelist`` (evaluation ids
    that must never enter the index)."""

    def __init__(self, options: dict[str, Any], dim: int):
        o = checked_retrieval_options(options)
        self.path, self.k = o["index"], int(o["k"])
        if os.path.exists(self.path):
            self.index = ExemplarIndex.load(self.path, dim)
            self.index.extend_whitelist(list(o["whitelist"]))
        else:
            self.index = ExemplarIndex(dim, factory="Flat", whitelist=list(o["whitelist"]))
        self.values: dict[str, float] = {}
        self.baseline = NeighbourhoodBaseline(o["rho"])

    def neighbourhood_values(self, ids: Sequence[str], keys: np.ndarray) -> list[float | None]:
        """v_bar(N(q)) of each query (None: no neighbour with a value)."""
        hits = self.index.search(keys, self.k + 1)
        out = []
        for qid, row in zip(ids, hits):
            values = [self.values[h] for h, _ in row if h != qid and h in self.values][: self.k]
            out.append(neighbourhood_value(values))
        return out

    def append(self, ids: Sequence[str], keys: np.ndarray, values: Sequence[float]) -> None:
        """Add the accepted questions as exemplars (new ids only; a revisit updates the value)."""
        new = [j for j, qid in enumerate(ids) if self.index.position(qid) is None]
        if new:
            report = self.index.add([ids[j] for j in new], keys[new])
            refused = set(report.whitelisted) | set(report.blocked)
        else:
            refused = set()
        for qid, v in zip(ids, values):
            if qid not in refused:
                self.values[qid] = float(v)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Values, baselines and the index size; the index itself is written to its file."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.index.save(self.path)
        return {"values": dict(self.values), "baseline": self.baseline.state_dict(), "count": len(self.index.ids)}

    def load_state_dict(self, state: dict) -> None:
        """Restore the values and baselines; exemplars the file holds beyond the checkpoint's are deactivated."""
        self.values = {str(k): float(v) for k, v in state["values"].items()}
        self.baseline.load_state_dict(state["baseline"])
        count = int(state["count"])
        if len(self.index.ids) > count:  # rebuilt from the checkpoint's exemplars, in their order
            ids, vectors = self.index.ids[:count], np.array(self.index.vectors[:count])
            rebuilt = ExemplarIndex(self.index.dim, factory="Flat", whitelist=sorted(self.index.whitelist))
            if ids:
                rebuilt.add(ids, vectors)
            self.index = rebuilt

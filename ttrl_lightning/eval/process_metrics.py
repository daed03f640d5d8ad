"""Process metrics of agent trajectories (Pixelis 4.1, 4.2, supp. S5 "Process metrics vs. correctness"): RaPR,
RaCPR, chain length, tool error rate, per-tool latency.

The paper names RaPR / RaCPR "rationalized process recall" and "chain precision-recall for tool use and
composition" and gives their knobs (Table 3: adjacency gate tau = 0.30, L_min = 3, gamma = 0.20) but not
their formulas. **Our reading**, per trajectory with reference chain ``ref`` (the tool chain that solves the
task, ``data.cota.text_chain``):

* a step is *valid* when its call ran (``ok``: no error observation);
* the *matched* steps are the longest in-order common subsequence (LCS) of the valid steps' tool names with
  ``ref``'s; with step fidelities given (``fidelity[i]``: the step's tool metric against the truth, e.g.
  ``fidelity.visfid``'s step scores), a step matches only when its fidelity is >= ``gamma`` (the
  *alignment* knob); with step embeddings given, a matched step after another must have cosine >= ``tau``
  with the step before it (the *adjacency gate*; the paper computes it on a frozen external encoder);
* **RaPR** = matched / len(ref): how much of the needed process the trajectory carried out validly (recall;
  extra or failed calls do not lower it);
* **RaCPR** = F1 of chain precision matched / (number of calls) and recall matched / len(ref): failed calls,
  detours and repeats lower it (composition). A trajectory with no call scores 0 on both.

``L_min`` ("suppresses short bursts") has no counterpart in our reading: the generated tasks' reference
chains have one to three steps, below the paper's L_min = 3 for all but one task family; we leave it out
rather than guess. Both metrics lie in [0, 1]; benchmark tables print them x100.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

#: Pixelis Table 3 defaults (sensitivity ranges tau in [0.25, 0.40], gamma in [0.15, 0.30])
RACPR_TAU = 0.30
RACPR_GAMMA = 0.20


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def _cosine(u: Sequence[float], v: Sequence[float]) -> float:
    nu = math.sqrt(sum(x * x for x in u))
    nv = math.sqrt(sum(x * x for x in v))
    if nu == 0 or nv == 0:
        return 0.0
    return sum(x * y for x, y in zip(u, v)) / (nu * nv)


def matched_steps(tools: Sequence[str | None], errors: Sequence[str | None], reference: Sequence[str], *,
                  fidelity: Sequence[float | None] | None = None,
                  embeddings: Sequence[Sequence[float]] | None = None,
                  tau: float = RACPR_TAU, gamma: float = RACPR_GAMMA) -> int:
    """Number of steps matched to ``reference`` (see the module docstring): valid steps (``errors[i]`` None,
    ``tools[i]`` not None), fidelity >= ``gamma`` when ``fidelity`` is given (None entries pass), then the
    LCS with ``reference``; with ``embeddings``, a step whose cosine with the previous step is below ``tau``
    is dropped before the LCS (the first step always passes the gate)."""
    if len(tools) != len(errors):
        raise ValueError(f"{len(tools)} tools but {len(errors)} errors")
    for name, values in (("fidelity", fidelity), ("embeddings", embeddings)):
        if values is not None and len(values) != len(tools):
            raise ValueError(f"{len(values)} {name} for {len(tools)} steps")
    kept = []
    for i, (tool, err) in enumerate(zip(tools, errors)):
        if tool is None or err is not None:
            continue
        if fidelity is not None and fidelity[i] is not None and fidelity[i] < gamma:
            continue
        if embeddings is not None and i > 0 and _cosine(embeddings[i - 1], embeddings[i]) < tau:
            continue
        kept.append(tool)
    return _lcs(kept, list(reference))


def rapr(tools, errors, reference, **gates) -> float:
    """Rationalized process recall: matched / len(reference) (0 for an empty reference or no call)."""
    if not reference or not tools:
        return 0.0
    return matched_steps(tools, errors, reference, **gates) / len(reference)


def racpr(tools, errors, reference, **gates) -> float:
    """Chain precision-recall: F1 of matched / len(tools) and matched / len(reference)."""
    if not reference or not tools:
        return 0.0
    m = matched_steps(tools, errors, reference, **gates)
    if m == 0:
        return 0.0
    precision, recall = m / len(tools), m / len(reference)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class ProcessReport:
    """Means over trajectories: ``accuracy``, ``rapr``, ``racpr``, ``chain_length`` (calls per trajectory),
    ``tool_error_rate`` (failed calls / calls; 0 when there is no call), ``calls``, per-tool mean ``latency``
    in seconds over the calls that ran (memoised calls excluded), and ``n`` trajectories."""

    n: int
    accuracy: float
    rapr: float
    racpr: float
    chain_length: float
    tool_error_rate: float
    calls: int
    latency: dict[str, float]

    def as_dict(self) -> dict:
        return {"n": self.n, "accuracy": self.accuracy, "rapr": self.rapr, "racpr": self.racpr,
                "chain_length": self.chain_length, "tool_error_rate": self.tool_error_rate,
                "calls": self.calls, "latency": dict(self.latency)}


def process_report(trajectories: Iterable, references: Iterable[Sequence[str]],
                   correct: Iterable[bool]) -> ProcessReport:
    """Aggregate :class:`ProcessReport` of ``trajectories`` (``rollout.agent.Trajectory``: ``tools``,
    ``errors``, ``latencies``) with their reference chains and answer correctness.

    Reported with both gates off (our reading; Pixelis' gates use gamma and tau on a frozen DINOv2 encoder):
    no step fidelities (``gamma``) and no step embeddings (``tau``) are passed, because the generated tasks record no per-step ground truth to score a step's
    fidelity against and the paper's frozen external encoder (DINOv2) is not available here. These RaPR /
    RaCPR are therefore upper bounds of the gated ones (a gate can only drop matches); call :func:`rapr` /
    :func:`racpr` with ``fidelity=`` and ``embeddings=`` for the gated metrics."""
    trajectories, references, correct = list(trajectories), list(references), list(correct)
    if not (len(trajectories) == len(references) == len(correct)):
        raise ValueError(f"{len(trajectories)} trajectories, {len(references)} references, "
                         f"{len(correct)} correctness flags")
    if not trajectories:
        raise ValueError("no trajectories")
    calls = failed = 0
    per_tool: dict[str, list[float]] = {}
    ra, rc, lengths = [], [], []
    for t, ref in zip(trajectories, references):
        tools, errors = t.tools, t.errors
        ra.append(rapr(tools, errors, ref))
        rc.append(racpr(tools, errors, ref))
        lengths.append(len(tools))
        calls += len(tools)
        failed += sum(e is not None for e in errors)
        for tool, lat in zip(tools, t.latencies):
            if tool is not None and lat is not None:
                per_tool.setdefault(tool, []).append(lat)
    return ProcessReport(
        n=len(trajectories), accuracy=sum(map(bool, correct)) / len(correct), rapr=statistics.fmean(ra),
        racpr=statistics.fmean(rc), chain_length=statistics.fmean(lengths),
        tool_error_rate=failed / calls if calls else 0.0, calls=calls,
        latency={k: statistics.fmean(v) for k, v in sorted(per_tool.items())})

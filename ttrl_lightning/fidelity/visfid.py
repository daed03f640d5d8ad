"""VisFid, the pixel fidelity of a trajectory (Pixelis sec. 3.2.3, "Pixel fidelity and pseudo-references").

The paper: "we only score decisive tool steps (SEG/ZOOM, TRK, OCR, TEMP, PROP). At each such step we compare
the tool output with a pseudo-reference drawn from other successful trajectories or retrieved neighbours,
using the standard metric for that tool (IoU for boxes/masks, average IoU over tracklets, ANLS for OCR, and
F1-style scores for temporal and property tools). VisFid is the average of these per-step scores, with
pseudo-references chosen by simple matching rules".

Our reading, where the text is vague:

* a *decisive step* is a successful call (``ok``) of SEG, ZOOM, TRK, OCR, TEMP or PROP (errors are not
  scored here; they count in the tool error rate);
* a step's *pseudo-reference* in one reference trajectory is that trajectory's step of the same tool that
  agrees best with it (the matching rule: same tool, best score, as detection benchmarks match); the
  step's score is the mean of these best scores over the reference trajectories that call that tool;
* the per-tool scores (:data:`STEP_FIDELITY`) on artifacts: SEG -- objects matched one to one by mask IoU
  (box IoU when a side has no mask), matched IoUs summed over the larger object count; ZOOM -- crop box IoU;
  TRK -- :func:`~ttrl_lightning.fidelity.tracking.mean_track_iou`; OCR -- ANLS of the text (NFKC, punctuation
  stripped as in the paper's audit); TEMP -- segment F1 at tIoU >= 0.5; PROP -- attribute F1;
* ``VisFid(tau)`` is the mean over the scored steps, in [0, 1]; a trajectory with no decisive step, or none
  that any reference can score, has no VisFid (None), which a vote weight treats as 1 (neutral).

The paper's retrieval section also calls "VisFid" the share of retrieved exemplars whose evidence matches
the query footprint; that retrieval-side quantity belongs with the exemplar index, not here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ttrl_lightning.fidelity.anls import anls_score
from ttrl_lightning.fidelity.attributes import attribute_f1
from ttrl_lightning.fidelity.iou import box_iou, greedy_match, mask_iou
from ttrl_lightning.fidelity.temporal import segment_f1
from ttrl_lightning.fidelity.tracking import mean_track_iou
from ttrl_lightning.registry import Registry

Artifact = Mapping[str, Any]
#: one step of a trajectory: ``(tool name, artifact)`` (successful calls only)
Step = tuple[str, Artifact]


def seg_fidelity(pred: Artifact, ref: Artifact) -> float:
    p, r = list(pred.get("objects", [])), list(ref.get("objects", []))
    if not p and not r:
        return 1.0
    if not p or not r:
        return 0.0

    def iou(a, b):
        if "mask" in a and "mask" in b:
            return mask_iou(a["mask"], b["mask"])
        return box_iou(a["box"], b["box"])

    scores = np.array([[iou(a, b) for b in r] for a in p])
    return sum(s for _, _, s in greedy_match(scores)) / max(len(p), len(r))


def zoom_fidelity(pred: Artifact, ref: Artifact) -> float:
    return box_iou(pred["box"], ref["box"])


def _tracks(artifact: Artifact) -> dict[int, dict[int, list[float]]]:
    return {tr["id"]: dict(zip(tr["frames"], tr["boxes"])) for tr in artifact.get("tracks", [])}


def trk_fidelity(pred: Artifact, ref: Artifact) -> float:
    return mean_track_iou(_tracks(ref), _tracks(pred))


def ocr_fidelity(pred: Artifact, ref: Artifact) -> float:
    return anls_score(pred.get("text", ""), ref.get("text", ""), strip_punctuation=True)


def temp_fidelity(pred: Artifact, ref: Artifact) -> float:
    seg = lambda a: [(s["start"], s["end"]) for s in a.get("segments", [])]  # noqa: E731
    return segment_f1(seg(pred), seg(ref))


def prop_fidelity(pred: Artifact, ref: Artifact) -> float:
    return attribute_f1(pred, ref)


#: tool name -> ``(artifact, reference artifact) -> score in [0, 1]``
STEP_FIDELITY: Registry[Callable[[Artifact, Artifact], float]] = Registry("step fidelity")
for _name, _fn in (
    ("SEG", seg_fidelity),
    ("ZOOM", zoom_fidelity),
    ("TRK", trk_fidelity),
    ("OCR", ocr_fidelity),
    ("TEMP", temp_fidelity),
    ("PROP", prop_fidelity),
):
    STEP_FIDELITY.register(_name, _fn)
#: Pixelis' other names of the same tools
STEP_ALIASES = {"CROP": "ZOOM", "READ": "OCR"}


def _tool(name: str) -> str:
    return STEP_ALIASES.get(name.upper(), name.upper())


def step_fidelity(step: Step, references: Iterable[Sequence[Step]]) -> float | None:
    """Score of one decisive ``step`` against reference trajectories (None when no reference
    calls its tool)."""
    tool = _tool(step[0])
    if tool not in STEP_FIDELITY:
        return None
    per_reference = []
    for ref in references:
        same = [a for name, a in ref if _tool(name) == tool]
        if same:
            per_reference.append(max(STEP_FIDELITY[tool](step[1], a) for a in same))
    return sum(per_reference) / len(per_reference) if per_reference else None


def visfid(steps: Sequence[Step], references: Sequence[Sequence[Step]]) -> float | None:
    """``VisFid(tau)``: the mean :func:`step_fidelity` of ``steps`` (tau's successful tool steps) against
    ``references`` (the steps of other successful trajectories, or the truth); None when nothing is scored."""
    scores = [s for s in (step_fidelity(step, references) for step in steps) if s is not None]
    return sum(scores) / len(scores) if scores else None


def group_visfid(evidence: Sequence[Sequence[Step]], successful: Sequence[bool]) -> list[float | None]:
    """VisFid of each of one question's rollouts against the others: rollout ``j``'s steps
    ``evidence[j]`` are scored (:func:`visfid`) with the steps of every *other* successful rollout
    (``successful[k]``: in Pixelis' successful set S; agent TTRL passes the votes that predict the question's
    unweighted majority answer, ``modules.ttrl.labelers.pixel_inputs``) as the pseudo-references (Pixelis
    sec. 3.2.3: "a pseudo-reference drawn from other successful trajectories"). None where nothing is scored (no
    decisive step, or no other successful rollout calls its tools)."""
    if len(evidence) != len(successful):
        raise ValueError(f"{len(evidence)} rollouts' evidence but {len(successful)} success flags")
    return [visfid(steps, [evidence[k] for k in range(len(evidence)) if k != j and successful[k]])
            for j, steps in enumerate(evidence)]

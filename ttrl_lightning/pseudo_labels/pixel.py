"""``pixel``: Pixel TTRL's uncertainty-weighted consensus with abstention (Pixelis sec. 3.2.3, appendix 6).

For one question's ``N`` rollouts (pool schema, every rollout with per-token ``entropy`` and ``logprob``):

1. decisive tokens ``D_j`` of rollout ``j`` (``decisive_masks``, default every token; see
   :func:`decisive_token_mask` for the decisive steps of a tool-using trace);
2. decisive-step entropy ``H_j = mean_{t in D_j} entropy_{j,t}``;
3. calibrated confidence (temperature scaling): ``p_j = exp(mean_{t in D_j} logprob_{j,t})`` (the geometric
   mean token probability), clamped into ``[1e-6, 1 - 1e-6]``, and ``Cal_j = sigmoid(logit(p_j) / T)``;
   ``T = temperature`` (1.0 = uncalibrated), fitted on a labelled dev-cal split by :func:`fit_temperature`
   (or :func:`calibrate_pixel`). Reading of ``Cal_j`` (issue 21, D18): the paper names it "a calibrated
   confidence (temperature scaling on a dev-cal split)" without saying of what; the confidence scaled here is
   ``p_j``, the rollout's own probability on its decisive tokens. Its remark that ``r_j`` is "absorbed into
   ``Cal_j``" is the same product as the separate factor ``r_j`` of step 5;
4. pixel fidelity ``VisFid_j`` (``visual_fidelity``; ``None``: 1.0 for every rollout and
   ``info["visual_fidelity"] = "neutral"``, as long as no tool output is scored) and Dawid-Skene reliability
   ``r_j`` (``reliability``; ``None``: 1.0; :func:`batch_reliability` computes it over a batch);
5. weights ``w_j = exp(-H_j) * Cal_j * VisFid_j * r_j`` (``consensus.pixelis_weights``), class scores
   ``s(a) = sum_{j: y_j = a} w_j`` over answer-equivalence classes, ``y* = argmax_a s(a)``
   (``consensus.aggregate(..., "weighted")``; its tie rule: the answer whose earliest supporting rollout
   comes first);
6. abstention mask ``m(q) = 0`` (appendix 6, "Masks") when the normalised weighted margin
   ``(s_(1) - s_(2)) / sum_a s(a)`` is below ``delta``, or, with ``conformal_qhat``, when the split-conformal
   set ``{a : 1 - s(a)/sum s <= qhat}`` is not a single answer. Also abstains: a tie of the two largest
   supports (margin <= 1e-12, float round-off of equal sums; always, also with ``delta = 0``), every weight
   0, and unextractable answers (:data:`~ttrl_lightning.answers.NO_ANSWER`, which competes as one class and
   counts in the margin) winning the vote. Abstaining: ``label=None``, rewards all 0, ``abstain=True``,
   ``info["abstain_reason"]``;
7. rewards ``r_j = 1[y_j = y*]`` (answer-agreement mask ``y(tau, a_hat)``).

Near-duplicate rejection (appendix 6, practical note iii: "reject near-duplicate rollouts by frame-IoU >
0.85"). Text rollouts have no frames; their similarity is the Jaccard index of the completions' (``text``)
character 3-gram sets (a text shorter than 3 characters is its own single gram, so exact duplicates always
have similarity 1.0; a rollout without ``text`` is never a duplicate). Reading: a rollout whose similarity
to an earlier *kept* rollout exceeds ``duplicate_threshold`` stays in the **vote** (the votes of i.i.d.
samples are evidence, and dropping them would bias the label towards rare answers) but is rejected from the
**update**: ``info["update_mask"][j] = False`` and ``info["duplicates"]`` counts them; the rewards are left
as they are and the trainer drops the masked rollouts. ``duplicate_threshold=None`` disables it.

``info``: ``weights`` (``w_j``), ``entropy`` (``H_j``), ``calibration`` (``Cal_j``), ``reliability``,
``visual_fidelity`` (the list, or ``"neutral"``), ``support``, ``margin``, ``confidence`` (``s(y*) /
sum_a s(a)`` of the vote's winner, 0 with no vote mass), ``prediction_set`` (with ``conformal_qhat``),
``update_mask``, ``duplicates`` and, when abstaining, ``abstain_reason``.
"""
from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import torch

from ..answers import NO_ANSWER
from ..consensus import (aggregate, conformal_threshold, dawid_skene, dawid_skene_reliability,
                         pixelis_weights, rollout_annotator_labels)
from .label import PSEUDO_LABELERS, PseudoLabel
from .rollouts import PseudoLabelError, canonical_answers, check_rollouts, matches, token_signal

__all__ = ["pixel_label", "decisive_token_mask", "temperature_scale", "fit_temperature",
           "batch_reliability", "rollout_similarity", "calibrate_pixel", "PixelCalibration",
           "CONFIDENCE_CLAMP", "TEMPERATURE_BOUNDS", "TIE_TOLERANCE"]

log = logging.getLogger(__name__)

METHOD = "pixel"
#: ``p_j`` is clamped into ``[CONFIDENCE_CLAMP, 1 - CONFIDENCE_CLAMP]`` before the logit.
CONFIDENCE_CLAMP = 1e-6
#: :func:`fit_temperature` searches ``T`` in this interval.
TEMPERATURE_BOUNDS = (1e-2, 1e2)
#: a normalised margin at most this is a tie (equal supports up to float round-off): always abstains.
TIE_TOLERANCE = 1e-12
#: per-token entropy below ``-SIGN_SLACK`` or log-probability above ``SIGN_SLACK`` is refused (round-off).
SIGN_SLACK = 1e-5


# -------------------------------------------------------------------------------------- decisive steps

def decisive_token_mask(completion_ids: Sequence[int], call_start_id: int, call_end_id: int,
                        observation_end_id: int) -> list[bool]:
    """The decisive tokens ``D(tau)`` of one completion (Pixelis sec. 3.2.3: entropy "on decisive steps").

    Decisive steps of a chain-of-thought-action trace (``tools.protocol``: ``<call>name(args)</call>`` then
    the environment's ``<out>result</out>``):

    * every **tool call**: the tokens from a ``call_start_id`` through the next ``call_end_id``, both
      delimiters included (an unterminated call runs to the end);
    * the **final answer step**: every token after the last ``observation_end_id`` (the whole completion when
      no observation was returned, in particular when there is no tool call).

    Everything else (free reasoning between calls, observations written by the tools) is not decisive. A
    completion in which this selects nothing (it ends right after an observation, cut by the token budget,
    without a call) counts every token as decisive, so each rollout has an entropy and a confidence.

    Args:
        completion_ids: the completion's token ids (aligned with its per-token ``entropy`` / ``logprob``).
        call_start_id, call_end_id, observation_end_id: the ids of ``CALL_START``, ``CALL_END`` and
            ``OBSERVATION_END`` in the policy's tokenizer.
    Returns:
        one bool per token.
    """
    ids = []
    for k, t in enumerate(completion_ids):
        if isinstance(t, bool) or not isinstance(t, int):
            if isinstance(t, torch.Tensor) and t.numel() == 1 and not t.dtype.is_floating_point:
                t = int(t)
            else:
                raise TypeError(f"completion_ids[{k}] must be an int token id, got {type(t).__name__}")
        ids.append(t)
    for name, v in (("call_start_id", call_start_id), ("call_end_id", call_end_id),
                    ("observation_end_id", observation_end_id)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int token id, got {type(v).__name__}")
    if len({call_start_id, call_end_id, observation_end_id}) != 3:
        raise ValueError("call_start_id, call_end_id and observation_end_id must be three different ids")
    last_obs = max((k for k, t in enumerate(ids) if t == observation_end_id), default=-1)
    mask = [k > last_obs for k in range(len(ids))]
    in_call = False
    for k, t in enumerate(ids):
        if t == call_start_id:
            in_call = True
        if in_call:
            mask[k] = True
        if t == call_end_id:
            in_call = False
    return mask if any(mask) else [True] * len(ids)


def _decisive(rollouts, j: int, masks) -> tuple[torch.Tensor, torch.Tensor]:
    """Rollout ``j``'s decisive-token entropy and log-probability arrays, every error naming the field."""
    ent = token_signal(rollouts, j, "entropy", METHOD)
    lp = token_signal(rollouts, j, "logprob", METHOD)
    if ent.numel() != lp.numel():
        raise PseudoLabelError(f"{METHOD}: rollouts[{j}].logprob has {lp.numel()} tokens but entropy has "
                               f"{ent.numel()}")
    mask = None if masks is None else masks[j]
    if mask is not None:
        where = f"{METHOD}: decisive_masks[{j}]"
        if isinstance(mask, (str, bytes)) or not isinstance(mask, (Sequence, torch.Tensor)):
            raise PseudoLabelError(f"{where} must be a list of bools, got {type(mask).__name__}")
        vals = mask.tolist() if isinstance(mask, torch.Tensor) else list(mask)
        for k, b in enumerate(vals):
            if not isinstance(b, bool):
                raise PseudoLabelError(f"{where}[{k}] must be a bool, got {type(b).__name__}")
        if len(vals) != ent.numel():
            raise PseudoLabelError(f"{where} has {len(vals)} entries but rollouts[{j}] has "
                                   f"{ent.numel()} tokens")
        if not any(vals):
            raise PseudoLabelError(f"{where} selects no token (a rollout needs at least one decisive token)")
        keep = torch.tensor(vals, dtype=torch.bool)
        ent, lp = ent[keep], lp[keep]
    for name, x, bad, rule in (("entropy", ent, ent < -SIGN_SLACK, "an entropy must be >= 0"),
                               ("logprob", lp, lp > SIGN_SLACK, "a log-probability must be <= 0")):
        if bool(bad.any()):
            k = int(torch.nonzero(bad)[0])
            raise PseudoLabelError(f"{METHOD}: rollouts[{j}].{name} holds {float(x[k])} at decisive "
                                   f"token {k} ({rule})")
    return ent, lp


def _check_masks(masks, n: int):
    if masks is None:
        return None
    if isinstance(masks, (str, bytes)) or not isinstance(masks, Sequence):
        raise PseudoLabelError(f"{METHOD}: decisive_masks must be a list (one mask or None per rollout), "
                               f"got {type(masks).__name__}")
    if len(masks) != n:
        raise PseudoLabelError(f"{METHOD}: decisive_masks has {len(masks)} entries for {n} rollouts")
    return list(masks)


def vote_entropy(answers: Sequence[str]) -> float:
    """Shannon entropy (nats) of the unweighted vote shares of ``answers`` (canonical answer classes)."""
    counts = Counter(answers)
    n = len(answers)
    return float(-sum(c / n * math.log(c / n) for c in counts.values())) if n else 0.0


# ----------------------------------------------------------------------------------------- calibration

def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature <= 0:
        raise PseudoLabelError(f"{METHOD}: temperature must be a finite number > 0, got {temperature!r}")
    return float(temperature)


def _logits(confidences) -> torch.Tensor:
    p = torch.as_tensor(confidences, dtype=torch.float64).clamp(CONFIDENCE_CLAMP, 1.0 - CONFIDENCE_CLAMP)
    return torch.log(p) - torch.log1p(-p)


def temperature_scale(confidences, temperature: float = 1.0) -> torch.Tensor:
    """Temperature scaling (Guo et al. 2017) of confidences ``p``: ``sigmoid(logit(p) / T)``, ``p`` clamped
    into ``[1e-6, 1 - 1e-6]``. ``T > 1`` softens overconfident scores, ``T = 1`` leaves them (clamped)."""
    return torch.sigmoid(_logits(confidences) / _check_temperature(temperature))


def fit_temperature(confidences: Sequence[float], correct: Sequence[bool]) -> float:
    """Fit ``T`` by minimising the binary NLL of ``sigmoid(logit(p_i) / T)`` against ``correct_i`` on a
    labelled dev-cal split (Pixelis appendix 9: "TS T ~ 1.2 on the dev-cal split").

    ``NLL(s) = sum_i softplus(-z_i s) [correct_i] + softplus(z_i s) [not correct_i]`` with ``z = logit(p)``
    and ``s = 1/T`` is convex in ``s`` (a one-coefficient logistic regression), so the minimiser is the root
    of the increasing ``dNLL/ds = sum_i z_i (sigmoid(z_i s) - correct_i)``, found by bisection in ``log s``
    over ``T`` in :data:`TEMPERATURE_BOUNDS`. When the root lies outside, the nearest bound is returned and a
    warning logged (e.g. every confident rollout correct pushes ``T`` towards 0). Every ``p = 0.5`` (no
    information) gives 1.0.

    Args:
        confidences: ``[M]`` confidences ``p_i`` in ``[0, 1]`` (for rollouts, ``exp`` of the mean decisive
            log-probability).
        correct: ``[M]`` bools (0/1), whether the rollout's answer is the gold answer.
    """
    if isinstance(confidences, (str, bytes)) or isinstance(correct, (str, bytes)):
        raise TypeError("confidences and correct must be sequences of numbers / bools")
    try:
        p = torch.as_tensor(list(confidences), dtype=torch.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError("confidences must be a list of numbers") from None
    y_list = list(correct)
    for i, c in enumerate(y_list):
        if not (isinstance(c, bool) or (isinstance(c, (int, float)) and c in (0, 1))):
            raise ValueError(f"correct[{i}] must be a bool (or 0/1), got {c!r}")
    if p.numel() == 0:
        raise ValueError("fit_temperature needs at least one (confidence, correct) pair")
    if p.numel() != len(y_list):
        raise ValueError(f"{p.numel()} confidences but {len(y_list)} correctness labels")
    bad = ~(torch.isfinite(p) & (p >= 0) & (p <= 1))
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise ValueError(f"confidences[{i}] = {float(p[i])} is not a probability in [0, 1]")
    y = torch.tensor([float(c) for c in y_list], dtype=torch.float64)
    z = _logits(p)
    if bool((z == 0).all()):
        return 1.0

    def grad(log_s: float) -> float:
        return float((z * (torch.sigmoid(z * math.exp(log_s)) - y)).sum())

    t_lo, t_hi = TEMPERATURE_BOUNDS
    lo, hi = -math.log(t_hi), -math.log(t_lo)  # log s = -log T
    if grad(lo) >= 0:
        log.warning("fit_temperature: the NLL minimum lies at T >= %g; returning the bound", t_hi)
        return t_hi
    if grad(hi) <= 0:
        log.warning("fit_temperature: the NLL minimum lies at T <= %g; returning the bound", t_lo)
        return t_lo
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if grad(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return math.exp(-0.5 * (lo + hi))


# ----------------------------------------------------------------------------------------- reliability

def batch_reliability(answers_per_query: Sequence[Sequence[str | None]], *, return_reason: bool = False):
    """Dawid-Skene reliability ``r_j`` of each rollout slot over a batch of queries (Pixelis appendix S2).

    Items = queries, annotators = rollout slots (the j-th rollout of every query), classes = per-query
    answer ranks (``consensus.rollout_annotator_labels``); ``consensus.dawid_skene`` with the paper's start
    (hard majority labels, smoothed-identity confusions), then the prior-weighted reliability
    ``r_j = sum_c prior[c] confusion[j, c, c]`` (``consensus.dawid_skene_reliability(conf, prior)``),
    rescaled so that the mean over slots is 1 (the Pixelis weights keep their scale).

    Answers are compared through the answer-equivalence classes of their query; ``None`` and
    :data:`~ttrl_lightning.answers.NO_ANSWER` are missing labels. Queries with no answer at all carry no
    information and are left out of the fit. With fewer than 2 informative queries there is nothing to
    estimate: every ``r_j`` is 1.0 and the reason is logged (and returned with ``return_reason=True``).

    Returns:
        one list per query with one ``r_j`` per rollout (slot ``j``'s reliability); with
        ``return_reason=True`` a pair ``(reliabilities, reason or None)``.
    """
    if isinstance(answers_per_query, (str, bytes)) or not isinstance(answers_per_query, Sequence):
        raise TypeError(f"answers_per_query must be a list of lists of answers, got "
                        f"{type(answers_per_query).__name__}")
    rows: list[list[str | None]] = []
    for q, row in enumerate(answers_per_query):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise TypeError(f"answers_per_query[{q}] must be a list of answers, got {type(row).__name__}")
        for j, a in enumerate(row):
            if a is not None and not isinstance(a, str):
                raise TypeError(f"answers_per_query[{q}][{j}] must be a str or None, got {type(a).__name__}")
        raw = [{"answer": NO_ANSWER if a is None else a} for a in row]
        canon = canonical_answers(raw, None, METHOD) if raw else []
        rows.append([None if a == NO_ANSWER else a for a in canon])
    out = [[1.0] * len(row) for row in rows]
    informative = [q for q, row in enumerate(rows) if any(a is not None for a in row)]
    reason = None
    if len(informative) < 2:
        queries = "query" if len(informative) == 1 else "queries"
        reason = (f"batch_reliability: {len(informative)} {queries} with an extractable answer"
                  " (Dawid-Skene needs at least 2); every reliability is 1.0")
        log.warning(reason)
        return (out, reason) if return_reason else out
    labels, num_classes = rollout_annotator_labels([rows[q] for q in informative])
    _, confusion, prior = dawid_skene(labels, num_classes)
    r = dawid_skene_reliability(confusion, prior)
    r = r / r.mean()
    slot = r.tolist()
    out = [[slot[j] for j in range(len(row))] for row in rows]
    return (out, reason) if return_reason else out


# ------------------------------------------------------------------------------------------ duplicates

def _grams(text: str) -> frozenset[str]:
    return frozenset([text]) if len(text) < 3 else frozenset(text[i:i + 3] for i in range(len(text) - 2))


def rollout_similarity(a: str, b: str) -> float:
    """Jaccard index ``|G(a) & G(b)| / |G(a) | G(b)|`` of the character 3-gram sets ``G`` of two completions
    (a text shorter than 3 characters is its own single gram): 1.0 for exact duplicates, 0.0 for disjoint
    texts. The text analogue of Pixelis' frame-IoU."""
    ga, gb = _grams(a), _grams(b)
    return len(ga & gb) / len(ga | gb)


def _update_mask(rollouts, threshold) -> list[bool]:
    n = len(rollouts)
    if threshold is None:
        return [True] * n
    texts = []
    for j, ro in enumerate(rollouts):
        t = ro.get("text")
        if t is not None and not isinstance(t, str):
            raise PseudoLabelError(f"{METHOD}: rollouts[{j}].text must be a string or None, "
                                   f"got {type(t).__name__}")
        texts.append(t)
    keep: list[bool] = []
    for j, t in enumerate(texts):
        dup = t is not None and any(keep[i] and texts[i] is not None
                                    and rollout_similarity(t, texts[i]) > threshold for i in range(j))
        keep.append(not dup)
    return keep


# --------------------------------------------------------------------------------------------- labeler

def _check_number(name: str, v, upper: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= upper:
        rng = ">= 0" if math.isinf(upper) else f"in [0, {upper:g}]"
        raise PseudoLabelError(f"{METHOD}: {name} must be a number {rng}, got {v!r}")


def _per_rollout(values, n: int, name: str, upper: float | None = None) -> list[float] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, torch.Tensor)):
        raise PseudoLabelError(f"{METHOD}: {name} must be a list of {n} numbers, got {type(values).__name__}")
    vals = values.tolist() if isinstance(values, torch.Tensor) else list(values)
    if len(vals) != n:
        raise PseudoLabelError(f"{METHOD}: {name} has {len(vals)} entries for {n} rollouts")
    for j, v in enumerate(vals):
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 \
            and (upper is None or v <= upper)
        if not ok:
            rng = f"in [0, {upper:g}]" if upper is not None else ">= 0"
            raise PseudoLabelError(f"{METHOD}: {name}[{j}] must be a finite number {rng}, got {v!r}")
    return [float(v) for v in vals]


def _signals(rollouts, decisive_masks, temperature: float):
    """``(H [N], p [N], Cal [N])`` of checked rollouts."""
    n = len(rollouts)
    masks = _check_masks(decisive_masks, n)
    h, p = [], []
    for j in range(n):
        ent, lp = _decisive(rollouts, j, masks)
        h.append(float(ent.mean()))
        p.append(math.exp(min(float(lp.mean()), 0.0)))
    cal = temperature_scale(p, temperature).tolist()
    return h, p, cal


@PSEUDO_LABELERS.register("pixel")
def pixel_label(rollouts: Sequence[dict], *, choices=None, delta: float = 0.1,
                conformal_qhat: float | None = None, temperature: float = 1.0,
                reliability: Sequence[float] | None = None,
                decisive_masks: Sequence[Sequence[bool] | None] | None = None,
                visual_fidelity: Sequence[float] | None = None,
                duplicate_threshold: float | None = 0.85,
                majority_entropy_max: float | None = None) -> PseudoLabel:
    """Pixel TTRL pseudo-label: uncertainty-weighted vote with margin / conformal abstention; see the module
    docstring for the formulas, the decisive steps and the near-duplicate reading.

    Args:
        rollouts: one question's rollouts; each needs per-token ``entropy`` and ``logprob``.
        choices: multiple-choice options for answer extraction.
        delta: abstain when the normalised weighted vote margin is below ``delta`` (ties always abstain).
        conformal_qhat: split-conformal threshold (:func:`calibrate_pixel`); abstain unless the set is a
            single answer. ``None``: no conformal set.
        temperature: ``T`` of ``Cal_j = sigmoid(logit(p_j) / T)`` (:func:`fit_temperature`).
        reliability: ``[N]`` Dawid-Skene ``r_j`` (:func:`batch_reliability`); ``None``: all 1.
        decisive_masks: ``[N]`` per-token bool masks (:func:`decisive_token_mask`), a ``None`` entry or
            ``None``: every token decisive.
        visual_fidelity: ``[N]`` ``VisFid_j`` in ``[0, 1]``; ``None``: neutral (1.0).
        duplicate_threshold: reject from the update a rollout whose 3-gram Jaccard similarity to an earlier
            kept rollout exceeds it (``info["update_mask"]``); ``None``: off.
        majority_entropy_max: the paper's "low-entropy majority (< 0.2)" gate (Pixelis sec. 3.2.3,
            "Successful set and exemplar"), which the paper gives without a base. Reading here: the Shannon
            entropy **in nats** of the unweighted answer votes (canonical classes, unextractable answers one
            class; ``info["vote_entropy"]``); the question abstains unless it is below the bound. At 0.2 nats
            this asks for near-unanimity: 15 of 16 votes give 0.234, 7 of 8 give 0.377. ``None`` (default):
            off, the weighted vote and its abstention rules alone decide.
    """
    rollouts = check_rollouts(rollouts, METHOD)
    n = len(rollouts)
    temperature = _check_temperature(temperature)
    _check_number("delta", delta, upper=1.0)
    if conformal_qhat is not None:
        _check_number("conformal_qhat", conformal_qhat, upper=math.inf)
    if duplicate_threshold is not None:
        _check_number("duplicate_threshold", duplicate_threshold, upper=1.0)
    if majority_entropy_max is not None:
        _check_number("majority_entropy_max", majority_entropy_max, upper=math.inf)
    rel = _per_rollout(reliability, n, "reliability")
    vis = _per_rollout(visual_fidelity, n, "visual_fidelity", upper=1.0)
    h, _, cal = _signals(rollouts, decisive_masks, temperature)
    weights = pixelis_weights(h, cal, vis, rel)
    answers = canonical_answers(rollouts, choices, METHOD)
    total = float(weights.sum())
    decision = aggregate(answers, "weighted", weights, conformal_qhat=conformal_qhat if total > 0 else None)
    update_mask = _update_mask(rollouts, duplicate_threshold)
    info = {
        "weights": weights.tolist(), "entropy": h, "calibration": cal,
        "reliability": rel if rel is not None else [1.0] * n,
        "visual_fidelity": vis if vis is not None else "neutral",
        "support": dict(decision.support), "margin": decision.margin,
        "confidence": decision.support[decision.answer] / total if total > 0 else 0.0,
        "update_mask": update_mask, "duplicates": update_mask.count(False),
        "vote_entropy": vote_entropy(answers),
    }
    if conformal_qhat is not None:
        info["prediction_set"] = decision.prediction_set if total > 0 else []
    reasons = []
    if total <= 0:
        reasons.append("every rollout has weight 0")
    else:
        if decision.answer == NO_ANSWER:
            reasons.append("unextractable answers win the weighted vote")
        if decision.margin <= TIE_TOLERANCE:
            reasons.append("tie between the two largest weighted supports")
        elif decision.margin < delta:
            reasons.append(f"weighted vote margin {decision.margin:.4g} < delta={delta:g}")
        if majority_entropy_max is not None and info["vote_entropy"] >= majority_entropy_max:
            reasons.append(f"vote entropy {info['vote_entropy']:.4g} nats >= majority_entropy_max="
                           f"{majority_entropy_max:g}")
        if conformal_qhat is not None and len(decision.prediction_set) != 1:
            reasons.append(f"conformal set holds {len(decision.prediction_set)} answers "
                           f"(qhat={conformal_qhat:g})")
    if reasons:
        info["abstain_reason"] = "; ".join(reasons)
        return PseudoLabel(None, [0.0] * n, True, info)
    return PseudoLabel(decision.answer, matches(answers, decision.answer), False, info)


# ----------------------------------------------------------------------------------------- calibration

@dataclass(frozen=True)
class PixelCalibration:
    """What :func:`calibrate_pixel` fitted on a labelled dev-cal split: pass ``temperature`` and
    ``conformal_qhat`` to ``pixel_label``. ``conformal_qhat`` is ``inf`` when the split is too small for
    ``alpha`` (every answer then enters the set)."""

    temperature: float
    conformal_qhat: float
    num_questions: int


#: per-question options of ``pixel_label`` that ``calibrate_pixel`` takes one entry per group of
_PER_GROUP = ("reliability", "visual_fidelity", "decisive_masks")
#: options that do not change the weighted support (accepted, unused)
_UNUSED = ("delta", "duplicate_threshold", "majority_entropy_max")


def calibrate_pixel(groups: Sequence[Sequence[dict]], golds: Sequence[str], alpha: float = 0.1, choices=None,
                    **label_kwargs) -> PixelCalibration:
    """Fit ``pixel_label``'s temperature and conformal threshold on a labelled dev-cal split.

    1. ``T = fit_temperature(p_j, 1[y_j = gold])`` over every rollout of every group (``p_j`` the geometric
       mean decisive-token probability);
    2. with that ``T``, each question's weighted support ``s(a)`` as in ``pixel_label`` and the normalised
       support of its gold answer ``s(gold) / sum_a s(a)`` (0 when no rollout gave it or no vote mass);
       ``conformal_qhat = consensus.conformal_threshold(those, alpha)``.

    Gold answers are compared through the answer-equivalence classes (the gold joins its group's classes as
    ``pixel_label`` would compare it).

    Args:
        groups: one list of pool-schema rollouts per dev-cal question.
        golds: one gold answer per question.
        alpha: conformal miscoverage level.
        choices: ``None`` or one entry per group (that question's multiple-choice options, or None).
        label_kwargs: ``reliability``, ``visual_fidelity``, ``decisive_masks``, each one entry per group
            (what ``pixel_label`` takes for that group, or None); ``delta`` and ``duplicate_threshold`` are
            accepted and unused. ``temperature`` and ``conformal_qhat`` are what is fitted here.
    """
    for key in label_kwargs:
        if key in ("temperature", "conformal_qhat"):
            raise TypeError(f"calibrate_pixel fits {key}; do not pass it")
        if key not in _PER_GROUP + _UNUSED:
            raise TypeError(f"calibrate_pixel got an unexpected option {key!r}; "
                            f"per-group options: {_PER_GROUP}")
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence) or not groups:
        raise PseudoLabelError(f"{METHOD}: calibrate_pixel needs a non-empty list of rollout groups")
    if isinstance(golds, (str, bytes)) or not isinstance(golds, Sequence) or len(golds) != len(groups):
        raise PseudoLabelError(f"{METHOD}: calibrate_pixel needs one gold answer per group "
                               f"({len(groups)} groups)")
    q = len(groups)

    def per_group(name, value):
        if value is None:
            return [None] * q
        if isinstance(value, (str, bytes, dict)) or not isinstance(value, Sequence) or len(value) != q:
            raise PseudoLabelError(f"{METHOD}: calibrate_pixel's {name} must hold one entry per group ({q})")
        return list(value)

    choices_g = per_group("choices", choices)
    opts = {k: per_group(k, label_kwargs.get(k)) for k in _PER_GROUP}
    answers, golds_c, p_all, correct, checked = [], [], [], [], []
    for g, (group, gold) in enumerate(zip(groups, golds)):
        if not isinstance(gold, str) or not gold.strip() or gold == NO_ANSWER:
            raise PseudoLabelError(f"{METHOD}: golds[{g}] must be a non-empty answer string, got {gold!r}")
        try:
            rollouts = check_rollouts(group, METHOD)
            canon = canonical_answers(list(rollouts) + [{"answer": gold}], choices_g[g], METHOD)
            _, p, _ = _signals(rollouts, opts["decisive_masks"][g], 1.0)
        except PseudoLabelError as e:
            raise PseudoLabelError(f"groups[{g}]: {e}") from None
        ans, gold_c = canon[:-1], canon[-1]
        answers.append(ans)
        golds_c.append(gold_c)
        checked.append(rollouts)
        p_all.extend(p)
        correct.extend(a == gold_c for a in ans)
    temperature = fit_temperature(p_all, correct)
    gold_support = []
    for g, rollouts in enumerate(checked):
        try:
            rel = _per_rollout(opts["reliability"][g], len(rollouts), "reliability")
            vis = _per_rollout(opts["visual_fidelity"][g], len(rollouts), "visual_fidelity", upper=1.0)
            h, _, cal = _signals(rollouts, opts["decisive_masks"][g], temperature)
        except PseudoLabelError as e:
            raise PseudoLabelError(f"groups[{g}]: {e}") from None
        support = aggregate(answers[g], "weighted", pixelis_weights(h, cal, vis, rel)).support
        total = sum(support.values())
        gold_support.append(min(1.0, support.get(golds_c[g], 0.0) / total) if total > 0 else 0.0)
    return PixelCalibration(temperature, conformal_threshold(gold_support, alpha), q)

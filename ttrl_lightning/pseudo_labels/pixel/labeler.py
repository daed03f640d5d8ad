"""``pixel``: Pixel TTRL's uncertainty-weighted consensus with abstention (Pixelis sec. 3.2.3, appendix 6).

Its parts live beside it: the decisive tokens (:mod:`.decisive`), temperature scaling and its fit
(:mod:`.temperature`), Dawid-Skene reliabilities (:mod:`.reliability`) and near-duplicates
(:mod:`.duplicates`); this module is the labeler and its dev-cal calibration, and re-exports them.

For one question's ``J`` rollouts (pool schema, every rollout with per-token ``entropy`` and ``logprob``):

1. decisive tokens ``D_j`` of rollout ``j`` (``decisive_masks``, default every token; see
   :func:`decisive_token_mask` for the decisive steps of a tool-using trace);
2. decisive-step entropy ``H_j = mean_{t in D_j} entropy_{j,t}``;
3. calibrated confidence (temperature scaling): ``p_j = exp(mean_{t in D_j} logprob_{j,t})`` (the geometric
   mean token probability), clamped into ``[1e-6, 1 - 1e-6]``, and ``Cal_j = sigmoid(logit(p_j) / T)``;
   ``T = temperature`` (1.0 = uncalibrated), fitted on a labelled dev-cal split by :func:`fit_temperature`
   (or :func:`calibrate_pixel`). Reading of ``Cal_j`` (supp. S6, "Calibrated voting weights"): the paper
   names it "a calibrated confidence (temperature scaling on a dev-cal split)" without saying of what; the confidence scaled here is
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
**update**: ``PseudoLabel.row_mask[j] = False`` and ``info["duplicates"]`` counts them; the rewards are left
as they are and the trainer drops the masked rollouts. ``duplicate_threshold=None`` disables it.

``info``: ``weights`` (``w_j``), ``entropy`` (``H_j``), ``calibration`` (``Cal_j``), ``reliability``,
``visual_fidelity`` (the list, or ``"neutral"``), ``support``, ``margin``, ``confidence`` (``s(y*) /
sum_a s(a)`` of the vote's winner, 0 with no vote mass), ``prediction_set`` (with ``conformal_qhat``),
``duplicates``, ``vote_entropy`` (nats, of the unweighted votes) and, when abstaining,
``abstain_reason``.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import torch

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.consensus import aggregate, conformal_threshold, pixelis_weights
from ttrl_lightning.errors import Bounds
from ttrl_lightning.pseudo_labels.pseudo_label import PSEUDO_LABELERS, PseudoLabel, PseudoLabelError
from ttrl_lightning.pseudo_labels.pixel.decisive import _check_masks, _decisive, decisive_token_mask
from ttrl_lightning.pseudo_labels.pixel.duplicates import duplicate_row_mask, rollout_similarity
from ttrl_lightning.pseudo_labels.pixel.reliability import batch_reliability
from ttrl_lightning.pseudo_labels.pixel.temperature import (CONFIDENCE_CLAMP, TEMPERATURE_BOUNDS, _check_temperature, fit_temperature,
                                temperature_scale)
from ttrl_lightning.pseudo_labels.rollouts import question_votes
from ttrl_lightning.pseudo_labels.question_votes import QuestionVotes, matches

__all__ = ["pixel_label", "decisive_token_mask", "temperature_scale", "fit_temperature",
           "batch_reliability", "rollout_similarity", "calibrate_pixel", "calibration_targets", "PixelCalibration",
           "CONFIDENCE_CLAMP", "TEMPERATURE_BOUNDS", "TIE_TOLERANCE"]

METHOD = "pixel"
#: a normalised margin at most this is a tie (equal supports up to float round-off): always abstains.
TIE_TOLERANCE = 1e-12


def vote_entropy(answers: Sequence[str]) -> float:
    """Shannon entropy (nats) of the unweighted vote shares of ``answers`` (canonical answer classes)."""
    counts = Counter(answers)
    n = len(answers)
    return float(-sum(c / n * math.log(c / n) for c in counts.values())) if n else 0.0


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
    bounds = Bounds(low=0, high=upper)
    for j, v in enumerate(vals):
        if v not in bounds:
            raise PseudoLabelError(f"{METHOD}: {name}[{j}] must be a finite number {bounds}, got {v!r}")
    return [float(v) for v in vals]


def _signals(group: QuestionVotes, decisive_masks, temperature: float):
    """``(H [J], p [J], Cal [J])`` of a question's votes."""
    n = len(group)
    masks = _check_masks(decisive_masks, n)
    h, p = [], []
    for j in range(n):
        ent, lp = _decisive(group, j, masks)
        h.append(float(ent.mean()))
        p.append(math.exp(min(float(lp.mean()), 0.0)))
    cal = temperature_scale(p, temperature).tolist()
    return h, p, cal


@PSEUDO_LABELERS.register("pixel")
def pixel_label(votes, *, choices=None, delta: float = 0.1,
                conformal_qhat: float | None = None, temperature: float = 1.0,
                reliability: Sequence[float] | None = None,
                decisive_masks: Sequence[Sequence[bool] | None] | None = None,
                visual_fidelity: Sequence[float] | None = None,
                duplicate_threshold: float | None = 0.85,
                majority_entropy_max: float | None = None) -> PseudoLabel:
    """Pixel TTRL pseudo-label: uncertainty-weighted vote with margin / conformal abstention; see the module
    docstring for the formulas, the decisive steps and the near-duplicate reading.

    Args:
        rollouts: one question's votes (``votes.QuestionVotes`` or rollout dicts); each needs per-token
            ``entropy`` and ``logprob``.
        choices: multiple-choice options for answer extraction.
        delta: abstain when the normalised weighted vote margin is below ``delta`` (ties always abstain).
        conformal_qhat: split-conformal threshold (:func:`calibrate_pixel`); abstain unless the set is a
            single answer. ``None``: no conformal set.
        temperature: ``T`` of ``Cal_j = sigmoid(logit(p_j) / T)`` (:func:`fit_temperature`).
        reliability: ``[J]`` Dawid-Skene ``r_j`` (:func:`batch_reliability`); ``None``: all 1.
        decisive_masks: ``[J]`` per-token bool masks (:func:`decisive_token_mask`), a ``None`` entry or
            ``None``: every token decisive.
        visual_fidelity: ``[J]`` ``VisFid_j`` in ``[0, 1]``; ``None``: neutral (1.0).
        duplicate_threshold: reject from the update a rollout whose 3-gram Jaccard similarity to an earlier
            kept rollout exceeds it (``PseudoLabel.row_mask``); ``None``: off.
        majority_entropy_max: the paper's "low-entropy majority (< 0.2)" gate (Pixelis sec. 3.2.3,
            "Successful set and exemplar"), which the paper gives without a base. Reading here: the Shannon
            entropy **in nats** of the unweighted answer votes (canonical classes, unextractable answers one
            class; ``info["vote_entropy"]``); the question abstains unless it is below the bound. At 0.2 nats
            this asks for near-unanimity: 15 of 16 votes give 0.234, 7 of 8 give 0.377. ``None`` (default):
            off, the weighted vote and its abstention rules alone decide.
    """
    group = question_votes(votes, choices, METHOD)
    n = len(group)
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
    h, _, cal = _signals(group, decisive_masks, temperature)
    weights = pixelis_weights(h, cal, vis, rel)
    answers = group.answers
    total = float(weights.sum())
    decision = aggregate(answers, "weighted", weights, conformal_qhat=conformal_qhat if total > 0 else None)
    row_mask = duplicate_row_mask(group, duplicate_threshold)
    info = {
        "weights": weights.tolist(), "entropy": h, "calibration": cal,
        "reliability": rel if rel is not None else [1.0] * n,
        "visual_fidelity": vis if vis is not None else "neutral",
        "support": dict(decision.support), "margin": decision.margin,
        "confidence": decision.support[decision.answer] / total if total > 0 else 0.0,
        "duplicates": row_mask.count(False),
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
        return PseudoLabel(None, [0.0] * n, True, info, row_mask=row_mask)
    return PseudoLabel(decision.answer, matches(answers, decision.answer), False, info, row_mask=row_mask)


# ----------------------------------------------------------------------------------------- calibration

@dataclass(frozen=True)
class PixelCalibration:
    """What :func:`calibrate_pixel` fitted on a labelled dev-cal split: pass ``temperature`` and
    ``conformal_qhat`` to ``pixel_label``. ``conformal_qhat`` is ``inf`` when the split is too small for
    ``alpha`` (every answer then enters the set). ``alpha``: the miscoverage level the threshold is the
    conformal quantile of (given, or fitted to ``target_coverage``); ``coverage``: the share of the dev-cal
    questions ``pixel_label`` answers (does not abstain on) with the fitted values."""

    temperature: float
    conformal_qhat: float
    num_questions: int
    alpha: float = 0.1
    coverage: float | None = None


#: per-question options of ``pixel_label`` that ``calibrate_pixel`` takes one entry per group of
_PER_GROUP = ("reliability", "visual_fidelity", "decisive_masks")
#: options that do not change the weighted support: accepted; the abstention rules among them (``_ABSTENTION``)
#: decide the dev-cal coverage, ``duplicate_threshold`` is unused
_WHOLE = ("delta", "duplicate_threshold", "majority_entropy_max")
_ABSTENTION = ("delta", "majority_entropy_max")


def calibration_targets(alpha=None, target_coverage=None) -> tuple[float | None, float | None]:
    """``(alpha, target_coverage)`` of :func:`calibrate_pixel` once checked: at most one of them given,
    ``alpha`` in (0, 1) (split conformal's miscoverage), ``target_coverage`` in (0, 1]; ``PseudoLabelError``
    otherwise (a ``voting.options`` check refuses them before the run, not at its calibration)."""
    if alpha is not None and target_coverage is not None:
        raise PseudoLabelError(f"{METHOD}: calibration takes alpha or target_coverage (which fits alpha), "
                               "not both")
    for name, value, bounds in (("alpha", alpha, Bounds(low=0, high=1, low_open=True, high_open=True)),
                                ("target_coverage", target_coverage, Bounds(low=0, high=1, low_open=True))):
        if value is not None and value not in bounds:
            raise PseudoLabelError(f"{METHOD}: {name} must be a number {bounds}, got {value!r}")
    return alpha, target_coverage


def calibrate_pixel(groups: Sequence[Sequence[dict]], golds: Sequence[str], alpha: float | None = None,
                    choices=None, target_coverage: float | None = None, **label_kwargs) -> PixelCalibration:
    """Fit ``pixel_label``'s temperature and conformal threshold on a labelled dev-cal split.

    1. ``T = fit_temperature(p_j, 1[y_j = gold])`` over every rollout of every group (``p_j`` the geometric
       mean decisive-token probability);
    2. with that ``T``, each question's weighted support ``s(a)`` as in ``pixel_label`` and the normalised
       support of its gold answer ``s(gold) / sum_a s(a)`` (0 when no rollout gave it or no vote mass);
       ``conformal_qhat = consensus.conformal_threshold(those, alpha)`` (``alpha`` 0.1 by default).
    3. ``target_coverage`` instead of ``alpha`` (Pixelis supp. S8: "abstention targets ~90% coverage"): the
       threshold is the conformal quantile of the smallest miscoverage level whose threshold lets
       ``pixel_label`` answer at least that share of the dev-cal questions. With ``n`` questions the
       thresholds are the sorted nonconformities ``q_k`` (``k = n, n-1, ..., 1``; ``q_k`` is the threshold of
       ``alpha = 1 - k / (n + 1)``); the first ``k`` from the top whose coverage reaches the target is taken,
       or, when none does, the one of the largest coverage (the largest ``k`` among equals). A weak model, on
       whose dev-cal questions the gold answer often gets no vote, has ``q_n = 1`` at the default ``alpha``:
       every voted answer is in every set and only unanimous questions are labelled; the target trades the
       set's guarantee for the paper's operating point.

    Gold answers are compared through the answer-equivalence classes (the gold joins its group's classes as
    ``pixel_label`` would compare it).

    Args:
        groups: one ``votes.QuestionVotes`` (or list of pool-schema rollouts) per dev-cal question.
        golds: one gold answer per question.
        alpha: conformal miscoverage level (default 0.1); not with ``target_coverage``.
        target_coverage: the share of dev-cal questions to answer, in (0, 1]; fits ``alpha`` (step 3).
        choices: ``None`` or one entry per group (that question's multiple-choice options, or None).
        label_kwargs: ``reliability``, ``visual_fidelity``, ``decisive_masks``, each one entry per group
            (what ``pixel_label`` takes for that group, or None); ``delta`` and ``majority_entropy_max`` as
            ``pixel_label`` takes them (they decide which dev-cal questions are answered: ``coverage``, step 3);
            ``duplicate_threshold`` is accepted and unused. ``temperature`` and ``conformal_qhat`` are what is
            fitted here.
    """
    for key in label_kwargs:
        if key in ("temperature", "conformal_qhat"):
            raise TypeError(f"calibrate_pixel fits {key}; do not pass it")
        if key not in _PER_GROUP + _WHOLE:
            raise TypeError(f"calibrate_pixel got an unexpected option {key!r}; "
                            f"per-group options: {_PER_GROUP}")
    alpha, target_coverage = calibration_targets(alpha, target_coverage)
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
            votes = question_votes(group, choices_g[g], METHOD)
            ans, gold_c = votes.classes_with(gold)
            _, p, _ = _signals(votes, opts["decisive_masks"][g], 1.0)
        except PseudoLabelError as e:
            raise PseudoLabelError(f"groups[{g}]: {e}") from None
        answers.append(ans)
        golds_c.append(gold_c)
        checked.append(votes)
        p_all.extend(p)
        correct.extend(a == gold_c for a in ans)
    temperature = fit_temperature(p_all, correct)
    gold_support = []
    for g, votes in enumerate(checked):
        try:
            rel = _per_rollout(opts["reliability"][g], len(votes), "reliability")
            vis = _per_rollout(opts["visual_fidelity"][g], len(votes), "visual_fidelity", upper=1.0)
            h, _, cal = _signals(votes, opts["decisive_masks"][g], temperature)
        except PseudoLabelError as e:
            raise PseudoLabelError(f"groups[{g}]: {e}") from None
        support = aggregate(answers[g], "weighted", pixelis_weights(h, cal, vis, rel)).support
        total = sum(support.values())
        gold_support.append(min(1.0, support.get(golds_c[g], 0.0) / total) if total > 0 else 0.0)
    abstention = {k: label_kwargs[k] for k in _ABSTENTION if k in label_kwargs}

    def coverage(qhat: float) -> float:
        """The share of the dev-cal questions pixel_label answers at ``temperature`` and ``qhat``."""
        answered = [not pixel_label(votes, choices=choices_g[g], conformal_qhat=qhat, temperature=temperature,
                                    duplicate_threshold=None, **abstention,
                                    **{k: opts[k][g] for k in _PER_GROUP}).abstain
                    for g, votes in enumerate(checked)]
        return sum(answered) / q

    if target_coverage is None:
        alpha = 0.1 if alpha is None else alpha
        qhat = conformal_threshold(gold_support, alpha)
        return PixelCalibration(temperature, qhat, q, alpha, coverage(qhat))
    scores = sorted(1.0 - s for s in gold_support)
    fits = [(k, coverage(scores[k - 1])) for k in range(q, 0, -1)]  # from the largest threshold down
    k, reached = next(((k, c) for k, c in fits if c >= target_coverage - 1e-12),
                      max(fits, key=lambda kc: (kc[1], kc[0])))
    return PixelCalibration(temperature, scores[k - 1], q, 1 - k / (q + 1), reached)

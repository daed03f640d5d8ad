"""Within-question discrimination of per-rollout scores: VisConf's Table 6 (App. D.2), ``ttrl bon --auc``.

For question ``q`` with correct rollouts ``C_q`` and incorrect rollouts ``I_q`` (its full original-view pool,
``N = R``), ``AUC_q(s)`` is the area under the ROC curve of score ``s`` for correctness
(``torchmetrics.functional.classification.binary_auroc``); it equals VisConf's Eq. 6,
``(1 / |C_q||I_q|) sum_{i in C_q, j in I_q} 1[s_i > s_j]``, when no correct and incorrect rollout tie (a tie
counts 1/2 here, 0 in Eq. 6). Only mixed-correctness questions (both sets non-empty) count; the table
macro-averages ``AUC_q`` over them (each question weighs the same), with a percentile bootstrap interval
over questions (resampled within each pool, i.e. each benchmark, when there are several:
:func:`~.benchmarks.stratified_bootstrap_means` with every question weighing the same).

Scores (:data:`AUC_SCORES`; each only when the pool has its signals), Table 6's rows first: ``K``
(confidence), ``V`` (visual engagement), ``mean_t k_t v_t`` (aligned token fusion, raw ``k``),
``mean_t k_t v_pi(t)`` (permuted token fusion: ``AUC_q`` averaged over 100 within-rollout permutations
``pi``), ``K V`` (trajectory fusion), ``C V`` (VisConf, ``c`` calibrated on the question's full pool); then
the covariance term ``Cov_t(v_t, k_t) = mean_t k_t v_t - K V`` (App. D.2 Eq. 3, reported in the text),
``mean_t c_t v_t`` (calibrated token fusion, Table 2's ablation), LookBack's ``L`` and ``-n`` (MinLength).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

from ttrl_lightning.eval.bon.benchmarks import percentile_interval, stratified_bootstrap_means
from ttrl_lightning.eval.bon.calibration import SortedTokens, calibrated_confidence_means
from ttrl_lightning.eval.bon.rollout_scores import rollout_scores
from ttrl_lightning.eval.bon.token_fusion import (FusionTokens, calibrated_token_fusion_means, permuted_token_fusion_means,
                           raw_token_fusion_means)

__all__ = ["AucScore", "AUC_SCORES", "full_pool_scores", "rollout_correct", "question_aucs", "auc_table",
           "format_auc_table"]


@dataclass(frozen=True)
class AucScore:
    """One row of the table: its ``signal`` name, ``formula``, and the pool ``signals`` it needs."""

    key: str
    signal: str
    formula: str
    signals: tuple[str, ...]


AUC_SCORES: tuple[AucScore, ...] = (
    AucScore("K", "Confidence", "K", ("self_certainty",)),
    AucScore("V", "Visual engagement", "V", ("visual_engagement",)),
    AucScore("kv_token", "Aligned token fusion", "mean_t k_t v_t", ("self_certainty", "visual_engagement")),
    AucScore("kv_permuted", "Permuted token fusion", "mean_t k_t v_pi(t)",
             ("self_certainty", "visual_engagement")),
    AucScore("KV", "Trajectory fusion", "K V", ("self_certainty", "visual_engagement")),
    AucScore("CV", "VisConf", "C V", ("self_certainty", "visual_engagement")),
    AucScore("cov", "Covariance term", "Cov_t(v, k)", ("self_certainty", "visual_engagement")),
    AucScore("cv_token", "Calibrated token fusion", "mean_t c_t v_t",
             ("self_certainty", "visual_engagement")),
    AucScore("L", "LookBack", "L", ("logprob", "image_attention")),
    AucScore("neg_len", "MinLength", "-n", ()),
)


def full_pool_scores(pool, lookback_alpha: float = 0.5, lookback_lambda: float = 1.25, eps: float = 1e-6,
                     chunk: int = 32, permutations: int = 100, seed: int = 0) -> dict[str, Tensor]:
    """``[Q, R]`` float64 scores of :data:`AUC_SCORES` on each question's full original-view pool (those whose
    signals the pool has); ``kv_permuted`` is ``[Q, R, permutations]``, one score per permutation (drawn
    from ``seed``)."""
    r0 = pool.num_rollouts_in_view(0)
    base = rollout_scores(pool, lookback_alpha, lookback_lambda)
    lengths = pool.lengths[:, :r0]
    out = {"neg_len": -base["len"]}
    for key in ("K", "V", "L"):
        if key in base:
            out[key] = base[key]
    if "K" in base and "V" in base:
        k_tok, v_tok = pool.signals["self_certainty"][:, :r0], pool.signals["visual_engagement"][:, :r0]
        out["KV"] = base["K"] * base["V"]
        out["kv_token"] = raw_token_fusion_means(k_tok, v_tok, lengths)
        out["cov"] = out["kv_token"] - out["KV"]
        c, cv, perm = [], [], []
        for start in range(0, pool.num_questions, chunk):
            sl = slice(start, start + chunk)
            qc = k_tok[sl].shape[0]
            idx = torch.arange(r0).expand(qc, 1, r0).contiguous()  # one subset: the full pool
            tokens = SortedTokens.build(k_tok[sl], lengths[sl])
            c.append(calibrated_confidence_means(tokens, idx, eps)[:, 0])
            fusion = FusionTokens.build(k_tok[sl], v_tok[sl], lengths[sl])
            cv.append(calibrated_token_fusion_means(fusion, tokens, idx, eps)[:, 0])
            perm.append(permuted_token_fusion_means(k_tok[sl], v_tok[sl], lengths[sl], permutations,
                                                    seed + start))
        out["CV"] = torch.cat(c) * base["V"]
        out["cv_token"] = torch.cat(cv)
        out["kv_permuted"] = torch.cat(perm)
    return out


def rollout_correct(pool) -> Tensor:
    """``[Q, R]`` bool: whether each original-view rollout's answer class matches the gold answer."""
    r0 = pool.num_rollouts_in_view(0)
    return pool.class_correct.gather(1, pool.answer_class[:, 0, :r0].clamp_min(0))


def question_aucs(scores: Tensor, correct: Tensor) -> Tensor:
    """``AUC_q`` of every mixed-correctness question (rows of ``scores`` ``[Q, R]`` / ``correct`` ``[Q, R]``),
    in order; questions with only correct or only incorrect rollouts are left out. Scores ``[Q, R, P]`` (one
    per permutation): ``AUC_q`` is the mean over the ``P`` scores' AUCs."""
    from torchmetrics.functional.classification import binary_auroc, multilabel_auroc

    def auc(q: int) -> Tensor:
        s, y = scores[q].double(), correct[q].long()
        if s.dim() == 1:
            return binary_auroc(s, y).double()
        p = s.shape[1]
        return multilabel_auroc(s, y[:, None].expand(-1, p), num_labels=p, average="macro").double()

    mixed = correct.any(1) & ~correct.all(1)
    return torch.stack([auc(q) for q in mixed.nonzero()[:, 0].tolist()]) if bool(mixed.any()) \
        else torch.zeros(0, dtype=torch.float64)


def auc_table(pools: Sequence, replicates: int = 2000, level: float = 0.95, seed: int = 0,
              lookback_alpha: float = 0.5, lookback_lambda: float = 1.25, permutations: int = 100,
              progress: Callable[[int], None] | None = None) -> list[dict]:
    """VisConf's Table 6 over one or more pools (one per benchmark): one row per score the pools support,
    ``{"key", "signal", "score", "auc", "lo", "hi", "questions"}`` (``auc`` the macro average of ``AUC_q``
    over all mixed-correctness questions; ``lo`` / ``hi`` its percentile bootstrap interval with questions
    resampled within their pool, ``None`` with ``replicates=0``; all three ``None`` when no question is
    mixed). Questions without gold are left out."""
    per_pool = []
    for b, pool in enumerate(pools):
        graded = pool.graded
        pool = pool.select(graded) if len(graded) != pool.num_questions else pool
        scores = full_pool_scores(pool, lookback_alpha, lookback_lambda, permutations=permutations,
                                  seed=seed + 1_000_003 * b)
        per_pool.append((scores, rollout_correct(pool)))
    rows = []
    for spec in AUC_SCORES:
        if not all(spec.key in scores for scores, _ in per_pool):
            continue
        strata = [question_aucs(scores[spec.key], correct) for scores, correct in per_pool]
        n = sum(x.numel() for x in strata)
        row = {"key": spec.key, "signal": spec.signal, "score": spec.formula, "questions": n,
               "auc": None, "lo": None, "hi": None}
        if n:
            row["auc"] = float(torch.cat(strata).mean())
            if replicates > 0:
                means = stratified_bootstrap_means(strata, replicates, seed, macro=False)
                row["lo"], row["hi"] = percentile_interval(means, level)
        rows.append(row)
        if progress is not None:
            progress(1)
    return rows


def format_auc_table(rows: list[dict]) -> str:
    """The table as text: signal, score, AUC, 95% interval, mixed-correctness questions."""
    head = f"{'signal':<26}{'score':<18}{'AUC':>8}   {'95% CI':<18}{'questions':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        auc = f"{r['auc']:.4f}" if r["auc"] is not None else "-"
        ci = f"[{r['lo']:.4f}, {r['hi']:.4f}]" if r["lo"] is not None else ""
        lines.append(f"{r['signal']:<26}{r['score']:<18}{auc:>8}   {ci:<18}{r['questions']:>10}")
    lines.append("(within-question AUROC of each per-rollout score for correctness, macro-averaged over the "
                 "questions with correct and incorrect rollouts; VisConf Table 6)")
    return "\n".join(lines)

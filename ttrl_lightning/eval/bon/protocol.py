"""Best-of-N evaluation: VisConf's Table-1 protocol, vectorised over questions and subsets.

Protocol (VisConf sec. 6 and appendix B): for each budget ``N`` smaller than the pool size ``R``, draw
``subsets`` fixed subsets of ``N`` rollouts without replacement per question (seeded, shared by all
methods; :mod:`.subsets`); ``N = R`` uses the full pool once. Inside each subset the calibration quantiles
of VisConf and every rank are recomputed (:mod:`.calibration`). Accuracy is averaged over subsets within a
question, then over questions. For the two-view methods (``BoNMethod.needs_views``: ``hms``,
``dual_view_majority``) ``N`` counts rollouts per view and the reframed view gets its own subsets; all other
methods use the original view.

The pieces, one module each: per-rollout scores (:mod:`.rollout_scores`), subsets (:mod:`.subsets`), the
per-subset calibration (:mod:`.calibration`), batched votes (:mod:`.votes`), what a method reads
(:mod:`.chunk`), the method registry :data:`BON_METHODS` (:mod:`.methods`) and, here, the loop over question
chunks and budgets. :mod:`ttrl_lightning.eval.bon.oracle` runs the same protocol question by question
through the public API and is the test oracle of this module.

Vectorisation: every quantity is a ``[questions, subsets, N]`` tensor; no subset's token values are ever
gathered (see :mod:`.calibration`).

Questions without a gold answer (``gold`` null or absent) cannot be scored: they are left out, and the
result names them (``BoNResult.without_gold``; the report's ``questions_without_gold``) instead of counting
them wrong. A pool where no question has a gold answer is refused
(:class:`~ttrl_lightning.data.pool.PoolError`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from ttrl_lightning.data.pool import PoolError
from ttrl_lightning.errors import UserError
from ttrl_lightning.eval.bon.calibration import SortedTokens, calibrated_confidence_means
from ttrl_lightning.eval.bon.chunk import QuestionChunk
from ttrl_lightning.eval.bon.config import BoNConfig
from ttrl_lightning.eval.bon.methods import BON_METHODS, DEFAULT_METHODS, BoNMethod, PlannedMethod, expand_methods
from ttrl_lightning.eval.progress_bar import progress_bar
from ttrl_lightning.eval.bon.rollout_scores import rollout_scores
from ttrl_lightning.eval.bon.subsets import draw_subsets, fixed_subsets

__all__ = ["BON_METHODS", "BoNConfig", "BoNMethod", "BoNResult", "PlannedMethod", "evaluate_pool",
           "draw_subsets", "fixed_subsets", "expand_methods", "DEFAULT_METHODS", "rollout_scores",
           "SortedTokens", "calibrated_confidence_means"]


@dataclass
class BoNResult:
    """Per-question accuracies ``per_question[method][N] -> [Q]`` (averaged over subsets) and config.

    ``num_questions``: questions evaluated (those with a gold answer, all of them unless interrupted);
    ``without_gold``: ids of the questions left out because they have no gold answer.
    """

    per_question: dict[str, dict[int, Tensor]] = field(default_factory=dict)
    config: BoNConfig | None = None
    complete: bool = True
    #: the KeyboardInterrupt (Ctrl-C, or SIGTERM under ``ttrl``) that ended an incomplete evaluation
    interrupted_by: KeyboardInterrupt | None = None
    num_questions: int = 0
    without_gold: list[str] = field(default_factory=list)

    def accuracy(self) -> dict[str, dict[str, float]]:
        return {m: {str(n): float(v.mean()) for n, v in per_n.items()}
                for m, per_n in self.per_question.items()}


def _check_pool(pool, plan: list[PlannedMethod], ns: Sequence[int], r0: int, r1: int) -> None:
    """Raise a :class:`~ttrl_lightning.errors.UserError` (``PoolError`` when the pool lacks what a method
    needs) when a planned method needs a view, signals or token counts the pool does not have, or a budget
    exceeds the pool size."""
    src = pool.source or "the pool"
    need_views = [p.report for p in plan if p.method.needs_views]
    if need_views and r1 == 0:
        raise PoolError(f"{src}: methods {need_views} need reframed-view rollouts in the pool")
    for p in plan:
        pool.require_signals(p.method.signals, p.report)
        if p.method.needs_token_counts and bool((pool.lengths[:, :r0] < 1).any()):
            raise PoolError(f"{src}: method {p.report!r} needs token counts (per-token arrays or num_tokens) "
                            "for every rollout")
    for n in ns:
        if n > r0 or (need_views and n > r1):
            raise UserError(f"N={n} exceeds the pool size ({r0} original / {r1} reframed rollouts)")


def _graded_questions(pool):
    """The pool restricted to the questions with a gold answer, and the ids of the others."""
    graded = pool.graded
    if not graded:
        raise PoolError(f"{pool.source or 'the pool'}: no record has a gold answer ('gold' is null or absent "
                        f"in all {pool.num_questions}), so accuracy cannot be evaluated")
    without = [pool.ids[i] for i, g in enumerate(pool.gold) if g is None]
    return (pool.select(graded) if without else pool), without


def evaluate_pool(pool, methods: Sequence[str] = DEFAULT_METHODS, cfg: BoNConfig | None = None,
                  progress: bool = True) -> BoNResult:
    """Run the best-of-N protocol on a :class:`~ttrl_lightning.data.pool.RolloutPool`.

    Questions without a gold answer are left out (``BoNResult.without_gold``). Raises a
    :class:`~ttrl_lightning.errors.UserError` when a method needs signals or a view the pool does not have,
    when ``N`` exceeds the pool size, or when no question has a gold answer. On ``KeyboardInterrupt`` the
    questions finished so far are returned with ``complete = False``.
    """
    cfg = cfg or BoNConfig()
    plan = expand_methods(methods, cfg)
    pool, without_gold = _graded_questions(pool)
    r0 = pool.num_rollouts_in_view(0)
    r1 = pool.num_rollouts_in_view(1) if pool.has_reframed else 0
    _check_pool(pool, plan, cfg.ns, r0, r1)
    need_views = any(p.method.needs_views for p in plan)
    need_calibration = any(p.method.calibrates_subsets for p in plan)
    token_signals = sorted({name for p in plan for name in p.method.token_signals})
    scores = rollout_scores(pool, cfg.lookback_alpha, cfg.lookback_lambda)

    result = BoNResult(config=cfg, without_gold=without_gold)
    q = pool.num_questions
    num_classes = pool.class_correct.shape[1]
    # fixed subsets, one generator per budget: identical whatever the chunking or the method list
    view_sizes = (r0, r1) if need_views else (r0,)
    subsets = {n: fixed_subsets(q, view_sizes, n, cfg.subsets, cfg.seed) for n in cfg.ns}
    acc = {p.report: {n: torch.zeros(q, dtype=torch.float64) for n in cfg.ns} for p in plan}
    bar = progress_bar(total=q, desc="best-of-N", enabled=progress)
    done = 0
    try:
        for start in range(0, q, cfg.chunk_questions):
            sl = slice(start, min(q, start + cfg.chunk_questions))
            tokens = (SortedTokens.build(pool.signals["self_certainty"][sl, :r0], pool.lengths[sl, :r0])
                      if need_calibration else None)
            chunk_scores = {k: v[sl] for k, v in scores.items()}
            for n in cfg.ns:
                members = [idx[sl] for idx in subsets[n]]  # per view: [Qc, S, N] rollout indices
                cls_views = [pool.answer_class[sl, view].gather(1, idx.flatten(1)).view_as(idx)
                             for view, idx in enumerate(members)]
                chunk = QuestionChunk(idx=members[0], cls=cls_views[0],
                                      cls1=cls_views[1] if need_views else None,
                                      correct_cls=pool.class_correct[sl], no_answer=pool.no_answer_class[sl],
                                      num_classes=num_classes, scores=chunk_scores, tokens=tokens, cfg=cfg)
                chunk.cache.update({("tokens", name): pool.signals[name][sl, :r0] for name in token_signals})
                for p in plan:
                    acc[p.report][n][sl] = p.method.correct(chunk, **p.params).mean(-1)
            done = sl.stop
            bar.update(sl.stop - sl.start)
    except KeyboardInterrupt as e:
        result.complete, result.interrupted_by = False, e
    finally:
        bar.close()
    # on interrupt, keep the questions finished so far (all budgets and methods are complete for them)
    result.per_question = {rep: {n: v[:done] for n, v in per_n.items()} for rep, per_n in acc.items()}
    result.num_questions = done
    return result

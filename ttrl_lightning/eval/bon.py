"""Best-of-N evaluation: VisConf's Table-1 protocol, vectorised over questions and subsets.

Protocol (VisConf sec. 6 and appendix B): for each budget ``N`` smaller than the pool size ``R``, draw
``subsets`` fixed subsets of ``N`` rollouts without replacement per question (seeded, shared by all
methods); ``N = R`` uses the full pool once. Inside each subset the calibration quantiles of VisConf and
every rank are recomputed. Accuracy is averaged over subsets within a question, then over questions.
For the two-view methods (``hms``, ``dual_view_majority``) ``N`` counts rollouts per view and the reframed
view gets its own subsets; all other methods use the original view.

Methods (:data:`BON_METHODS`): ``first`` (expected accuracy of one random rollout), ``oracle``, ``majority``,
``self_certainty``, ``self_certainty_borda`` (one entry ``self_certainty_borda_p{p}`` per exponent),
``lookback``, ``lookback_rwc``, ``visconf``, ``visconf_rwc``, ``visconf_wc``, ``min_length``, ``hms``,
``dual_view_majority``. Their rules are those of :mod:`ttrl_lightning.consensus` (same tie rules:
top-1 ties -> lowest rollout index, vote ties -> the answer whose earliest supporting rollout has the lowest
index); :mod:`ttrl_lightning.eval.reference` runs the same protocol question by question through the public
API and is the test oracle of this module.

Vectorisation: every quantity is a ``[questions, subsets, N]`` tensor. The pooled 5%/95% quantiles of a
subset come from a binary search over the question's globally sorted token values, using per-rollout
cumulative counts (``count(<= v) = sum_{j in subset} cnt_j(v)``); the calibrated mean ``C_i`` of a rollout
comes from its sorted tokens and prefix sums (``clip((k - a) / d, 0, 1)`` is 0 below ``a``, 1 from ``a + d``
and linear in between), so no subset's token values are ever gathered.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..consensus.ranks import borda_from_counts, greater_equal_counts, rank_numerators
from ..registry import Registry
from ..signals import CALIBRATION_QUANTILES
from .progress import progress_bar

__all__ = ["BON_METHODS", "BoNConfig", "BoNResult", "evaluate_pool", "draw_subsets", "expand_methods",
           "DEFAULT_METHODS", "rollout_scores"]

DEFAULT_METHODS = ("first", "oracle", "majority", "self_certainty", "self_certainty_borda", "lookback",
                   "lookback_rwc", "visconf", "visconf_rwc", "visconf_wc", "min_length", "hms",
                   "dual_view_majority")


@dataclass
class BoNConfig:
    ns: Sequence[int] = (8, 16, 32)
    subsets: int = 100
    seed: int = 0
    borda_p: Sequence[float] = (0.3, 0.7, 1.2, 2.0)
    lookback_alpha: float = 0.5
    lookback_lambda: float = 1.25
    visconf_alpha: float | None = None
    calibration_eps: float = 1e-6
    chunk_questions: int = 32


@dataclass
class BoNResult:
    """Per-question accuracies ``per_question[method][N] -> [Q]`` (averaged over subsets) and config."""

    per_question: dict[str, dict[int, Tensor]] = field(default_factory=dict)
    config: BoNConfig | None = None
    complete: bool = True
    num_questions: int = 0

    def accuracy(self) -> dict[str, dict[str, float]]:
        return {m: {str(n): float(v.mean()) for n, v in per_n.items()} for m, per_n in self.per_question.items()}


# ----------------------------------------------------------------------------------------------------
# per-rollout scores that do not depend on the subset


def rollout_scores(pool, alpha: float, lam: float) -> dict[str, Tensor]:
    """``[Q, R]`` float64 per-rollout scores: ``K`` (self-certainty), ``V`` (visual engagement),
    ``L`` (LookBack) and ``len`` — each only when the pool has the signals it needs."""
    r0 = pool.num_rollouts_in_view(0)
    lengths = pool.lengths[:, :r0]
    out: dict[str, Tensor] = {"len": lengths.double()}
    if not pool.signals:
        return out
    if bool((lengths < 1).any()):
        raise ValueError("per-token signals need every original-view rollout to have >= 1 token")
    t = next(iter(pool.signals.values())).shape[-1]
    valid = torch.arange(t)[None, None, :] < lengths[..., None]
    n = lengths.double()

    def mean(name: str) -> Tensor:
        return pool.signals[name][:, :r0].masked_fill(~valid, 0.0).sum(-1, dtype=torch.float64) / n

    if "self_certainty" in pool.signals:
        out["K"] = mean("self_certainty")
    if "visual_engagement" in pool.signals:
        out["V"] = mean("visual_engagement")
    if "logprob" in pool.signals and "image_attention" in pool.signals:
        a = pool.signals["image_attention"][:, :r0].double()
        if bool((a < 0).any()) or bool((a > 1 + 1e-6).any()):
            raise ValueError("image_attention must be an attention mass in [0, 1]")
        lp = pool.signals["logprob"][:, :r0].double()
        w = a.pow(lam) * valid
        log_a = torch.where(a > 0, a.log(), torch.zeros_like(a))
        total = w.sum(-1)
        num = (w * (lp + alpha * log_a)).sum(-1)
        out["L"] = torch.where(total > 0, num / total.clamp_min(1e-300), torch.full_like(total, -math.inf))
    for k, v in out.items():
        if bool(torch.isnan(v).any()):
            raise ValueError(f"per-rollout score {k} has NaN; check the pool's per-token arrays")
    return out


# ----------------------------------------------------------------------------------------------------
# subset sampling


def draw_subsets(num_questions: int, pool_size: int, n: int, subsets: int, gen: torch.Generator) -> Tensor:
    """``[Q, S, N]`` sorted rollout indices: ``S`` subsets without replacement per question; the full
    pool once (``S = 1``) when ``N == pool_size``."""
    if n > pool_size:
        raise ValueError(f"N={n} exceeds the pool size {pool_size}")
    if n < 1:
        raise ValueError(f"N must be >= 1, got {n}")
    if n == pool_size:
        return torch.arange(pool_size).expand(num_questions, 1, pool_size).clone()
    keys = torch.rand(num_questions, subsets, pool_size, generator=gen)
    return keys.argsort(-1)[..., :n].sort(-1).values


# ----------------------------------------------------------------------------------------------------
# vectorised primitives


def _first_positions(cls: Tensor, num_classes: int) -> Tensor:
    """``[..., C]`` position of each class's earliest supporting rollout (``N`` when absent)."""
    n = cls.shape[-1]
    pos = torch.arange(n).expand(cls.shape).contiguous()
    first = torch.full((*cls.shape[:-1], num_classes), n, dtype=torch.long)
    return first.scatter_reduce_(-1, cls, pos, reduce="amin")


def _vote(cls: Tensor, weights: Tensor, num_classes: int, first: Tensor | None = None) -> Tensor:
    """Winner class ``[...]`` of ``Vote(a) = sum_i 1[cls_i = a] w_i`` with VisConf's tie rule.

    ``cls, weights: [..., N]``; integer weights give exact ties. Positions are in original-rollout order,
    so "earliest supporting rollout" = lowest position. ``first`` may pass cached :func:`_first_positions`.
    """
    n = cls.shape[-1]
    if first is None:
        first = _first_positions(cls, num_classes)
    votes = torch.zeros(first.shape, dtype=weights.dtype).scatter_add_(-1, cls, weights)
    present = first < n
    lowest = torch.finfo(votes.dtype).min if votes.is_floating_point() else torch.iinfo(votes.dtype).min
    masked = votes.masked_fill(~present, lowest)
    cand = present & (masked == masked.amax(-1, keepdim=True))
    return torch.where(cand, first, n + 1).argmin(-1)


def _rwc_numerators(gt: Tensor, eq: Tensor) -> Tensor:
    """Exact integers ``2 (N - r_i)``; with ``N = 1`` the single rollout gets the only (non-zero) vote."""
    n = gt.shape[-1]
    if n == 1:
        return torch.ones_like(gt)
    return rank_numerators(gt, eq, n)


@dataclass
class SortedTokens:
    """Per-question token arrays prepared once for every subset and budget.

    ``sorted``: ``[Qc, R, T]`` each rollout's tokens ascending, +inf padded; ``prefix``: ``[Qc, R, T+1]``
    their prefix sums; ``pooled``: ``[Qc, R*T]`` all of a question's tokens ascending (+inf last);
    ``counts``: ``[Qc, R*T, R]`` int16, ``counts[q, m, j]`` = how many of rollout ``j``'s tokens are among
    the ``m + 1`` smallest pooled values; ``lengths``: ``[Qc, R]``.
    """

    sorted: Tensor
    prefix: Tensor
    pooled: Tensor
    counts: Tensor
    lengths: Tensor

    @classmethod
    def build(cls, tok: Tensor, lengths: Tensor) -> "SortedTokens":
        qc, r, t = tok.shape
        if t > torch.iinfo(torch.int16).max:
            raise ValueError(f"rollouts of more than {torch.iinfo(torch.int16).max} tokens are not supported")
        valid = torch.arange(t)[None, None, :] < lengths[..., None]
        # sort in the tokens' own precision (same order), then widen: the sums below are float64
        srt32 = torch.where(valid, tok, torch.full_like(tok, math.inf)).sort(-1).values
        pooled32, order = srt32.reshape(qc, r * t).sort(-1)
        srt, pooled = srt32.double(), pooled32.double()
        prefix = torch.zeros(qc, r, t + 1, dtype=torch.float64)
        prefix[..., 1:] = (srt32.masked_fill(~valid, 0.0).double()).cumsum(-1)  # valid tokens sort first
        owner = (order // t).unsqueeze(-1)
        counts = torch.zeros(qc, r * t, r, dtype=torch.int16)
        pooled_valid = torch.arange(r * t)[None, :] < lengths.sum(-1, keepdim=True)
        counts.scatter_(2, owner, pooled_valid.to(torch.int16).unsqueeze(-1))
        counts = counts.cumsum(1, dtype=torch.int16)
        return cls(sorted=srt, prefix=prefix, pooled=pooled, counts=counts, lengths=lengths)


def _pooled_order_positions(tokens: SortedTokens, idx: Tensor, targets: Tensor, block: int = 64) -> Tensor:
    """Positions in ``tokens.pooled`` of the order statistics ``targets`` (1-based ranks) of each subset's
    tokens.

    The number of subset tokens among the ``m + 1`` smallest pooled values is
    ``count_s(m) = sum_{j in subset} counts[m, j]``, non-decreasing in ``m``; the answer is the smallest ``m``
    with ``count_s(m) >= target``. A batched matmul of subset membership with the count rows at every
    ``block``-th position brackets it, a binary search inside the block finishes it.
    idx: ``[Qc, S, N]`` subset members; targets: ``[Qc, S, K]`` ranks in ``1..n_s``. Returns ``[Qc, S, K]``
    positions (long).
    """
    qc, s, k = targets.shape
    n = idx.shape[-1]
    m_total, r = tokens.counts.shape[1], tokens.counts.shape[2]
    grid = torch.arange(block - 1, m_total + block - 1, block).clamp_max(m_total - 1)  # block ends
    member = torch.zeros(qc, s, r, dtype=torch.float32).scatter_(2, idx, 1.0)
    grid_counts = torch.bmm(member, tokens.counts[:, grid, :].float().transpose(1, 2))  # [Qc, S, G], exact ints
    first_block = (grid_counts.unsqueeze(2) < targets.unsqueeze(-1)).sum(-1)  # [Qc, S, K]
    lo = first_block * block
    hi = torch.minimum(lo + block - 1, torch.tensor(m_total - 1))
    flat_counts = tokens.counts.reshape(qc, m_total * r)
    members = idx[:, :, None, :]  # [Qc, S, 1, N]
    for _ in range(max(1, math.ceil(math.log2(block))) + 1):
        mid = (lo + hi) // 2
        flat = (mid.unsqueeze(-1) * r + members).reshape(qc, s * k * n)
        below = flat_counts.gather(1, flat).view(qc, s, k, n).sum(-1, dtype=torch.int32)
        ok = below >= targets
        hi = torch.where(ok, mid, hi)
        lo = torch.where(ok, lo, mid + 1)
    return lo


def _pooled_quantile(tokens: SortedTokens, idx: Tensor, n_tok: Tensor, p: float) -> Tensor:
    """``torch.quantile(pooled subset tokens, p)`` (linear) for every subset: ``[Qc, S]`` float64.

    With ``h = (n - 1) p``: ``x_(floor h) + (h - floor h) (x_(floor h + 1) - x_(floor h))`` (0-based order
    statistics). Only ``x_(floor h)`` is searched; the next order statistic is the smallest member token not
    yet counted at that position (each member's next sorted token).
    """
    qc, s, n = idx.shape
    t = tokens.sorted.shape[-1]
    r = tokens.counts.shape[2]
    h = (n_tok - 1).double() * p
    f = h.floor()
    pos = _pooled_order_positions(tokens, idx, (f.long() + 1).unsqueeze(-1))[..., 0]  # [Qc, S]
    x_f = tokens.pooled.gather(1, pos)
    used = tokens.counts.reshape(qc, -1).gather(1, (pos.unsqueeze(-1) * r + idx).reshape(qc, s * n))
    used = used.view(qc, s, n).long()  # tokens of each member among the first pos + 1 pooled values
    flat_sorted = tokens.sorted.reshape(qc, -1)
    nxt = flat_sorted.gather(1, (idx * t + used.clamp_max(t - 1)).reshape(qc, s * n)).view(qc, s, n)
    nxt = torch.where(used < t, nxt, torch.full_like(nxt, math.inf)).amin(-1)
    frac = h - f
    return torch.where(frac > 0, x_f + frac * (nxt - x_f), x_f)


def calibrated_confidence_means(tokens: SortedTokens, idx: Tensor, eps: float,
                                quantiles=CALIBRATION_QUANTILES) -> Tensor:
    """``C_i`` of every subset member: the token mean of VisConf's calibrated confidence (sec. 4.1),
    with the 5%/95% quantiles pooled over the subset's rollouts.

    tokens: the question chunk's :class:`SortedTokens` of self-certainty; idx ``[Qc, S, N]``.
    Returns ``[Qc, S, N]`` float64.
    """
    qc, r, _ = tokens.sorted.shape
    s = idx.shape[1]
    lengths = tokens.lengths
    n_tok = lengths.gather(1, idx.flatten(1)).view_as(idx).sum(-1)  # [Qc, S] pooled tokens per subset
    q_lo = _pooled_quantile(tokens, idx, n_tok, quantiles[0])
    q_hi = _pooled_quantile(tokens, idx, n_tok, quantiles[1])
    d = (q_hi - q_lo).clamp_min(eps)
    upper = q_lo + d
    a_q = q_lo[:, None, :].expand(qc, r, s).contiguous()  # [Qc, R, S]
    u_q = upper[:, None, :].expand(qc, r, s).contiguous()
    n_le_a = torch.searchsorted(tokens.sorted, a_q, right=True)  # tokens with k <= a contribute 0
    n_lt_u = torch.searchsorted(tokens.sorted, u_q, right=False)  # tokens with k >= a + d contribute 1
    between = tokens.prefix.gather(2, n_lt_u) - tokens.prefix.gather(2, n_le_a)
    lin = (between - a_q * (n_lt_u - n_le_a)) / d[:, None, :]
    c_all = (lin + (lengths[..., None] - n_lt_u)) / lengths[..., None]  # [Qc, R, S]
    return c_all.transpose(1, 2).gather(2, idx)


# ----------------------------------------------------------------------------------------------------
# methods


@dataclass
class _Chunk:
    """Everything a method needs for one chunk of questions and one budget N (with per-chunk caches)."""

    idx: Tensor  # [Qc, S, N] original-view subset indices
    cls: Tensor  # [Qc, S, N]
    cls1: Tensor | None  # [Qc, S, N] reframed-view classes
    correct_cls: Tensor  # [Qc, C]
    no_answer: Tensor  # [Qc]
    num_classes: int
    scores: dict[str, Tensor]  # per-rollout [Qc, R]
    tokens: SortedTokens | None  # self-certainty tokens, for VisConf's calibration
    cfg: BoNConfig
    cache: dict = field(default_factory=dict)

    def score(self, name: str) -> Tensor:
        """``[Qc, S, N]`` subset scores: ``K``, ``L``, ``len`` or VisConf's ``Z`` (calibrated per subset)."""
        if name not in self.cache:
            if name == "Z":
                c = calibrated_confidence_means(self.tokens, self.idx, self.cfg.calibration_eps)
                v = self.score("V")
                a = self.cfg.visconf_alpha
                self.cache[name] = v * c if a is None else v.pow(a) * c.pow(1.0 - a)
            else:
                self.cache[name] = self.scores[name].gather(1, self.idx.flatten(1)).view_as(self.idx)
        return self.cache[name]

    def ranks(self, name: str) -> tuple[Tensor, Tensor]:
        key = ("ranks", name)
        if key not in self.cache:
            self.cache[key] = greater_equal_counts(self.score(name))
        return self.cache[key]

    def correct_of(self, winner: Tensor) -> Tensor:
        qc, s = winner.shape
        return self.correct_cls.gather(1, winner.reshape(qc, -1)).view(qc, s).double()

    def member_correct(self) -> Tensor:
        return self.correct_cls.gather(1, self.cls.flatten(1)).view_as(self.cls).double()


#: ``name -> (needed per-rollout scores, fn(chunk, **params) -> [Qc, S] correctness in [0, 1])``
BON_METHODS: Registry[tuple[tuple[str, ...], Callable]] = Registry("best-of-N method")


def _top1(ch: _Chunk, score: Tensor) -> Tensor:
    pos = score.argmax(-1, keepdim=True)  # first maximum = lowest original index
    return ch.correct_of(ch.cls.gather(2, pos).squeeze(-1))


def _vote_correct(ch: _Chunk, weights: Tensor) -> Tensor:
    if "first" not in ch.cache:
        ch.cache["first"] = _first_positions(ch.cls, ch.num_classes)
    return ch.correct_of(_vote(ch.cls, weights, ch.num_classes, ch.cache["first"]))


def _rwc_correct(ch: _Chunk, name: str) -> Tensor:
    return _vote_correct(ch, _rwc_numerators(*ch.ranks(name)))


BON_METHODS.register("first", ((), lambda ch: ch.member_correct().mean(-1)))
BON_METHODS.register("oracle", ((), lambda ch: ch.member_correct().amax(-1)))
BON_METHODS.register("majority", ((), lambda ch: _vote_correct(ch, torch.ones_like(ch.cls))))
BON_METHODS.register("self_certainty", (("K",), lambda ch: _top1(ch, ch.score("K"))))
BON_METHODS.register("self_certainty_borda",
                     (("K",), lambda ch, p: _vote_correct(ch, borda_from_counts(*ch.ranks("K"), p))))
BON_METHODS.register("lookback", (("L",), lambda ch: _top1(ch, ch.score("L"))))
BON_METHODS.register("lookback_rwc", (("L",), lambda ch: _rwc_correct(ch, "L")))
BON_METHODS.register("visconf", (("V", "K"), lambda ch: _top1(ch, ch.score("Z"))))
BON_METHODS.register("visconf_rwc", (("V", "K"), lambda ch: _rwc_correct(ch, "Z")))
BON_METHODS.register("visconf_wc", (("V", "K"), lambda ch: _vote_correct(ch, ch.score("Z"))))
BON_METHODS.register("min_length", (("len",), lambda ch: _top1(ch, -ch.score("len"))))


def _hms(ch: _Chunk) -> Tensor:
    """Self-Harmony HMS, vectorised: see ``consensus.views.harmonic_mean_select``."""
    if ch.cls1 is None:
        raise ValueError("method 'hms' needs reframed-view rollouts in the pool")
    qc, s, n = ch.cls.shape
    c = ch.num_classes
    ex = torch.arange(c)[None, None, :] == ch.no_answer[:, None, None]
    ones = torch.ones_like(ch.cls)
    n0 = torch.zeros(qc, s, c, dtype=torch.long).scatter_add_(2, ch.cls, ones).masked_fill(ex, 0)
    n1 = torch.zeros(qc, s, c, dtype=torch.long).scatter_add_(2, ch.cls1, ones).masked_fill(ex, 0)
    valid = (n0 > 0) & (n1 > 0)
    # 2 n0 n1 / (n0 N + n1 N): one division of exact integers, as the reference does
    hm = (2 * n0 * n1).double() / (n * (n0 + n1)).clamp_min(1).double()
    hm = torch.where(valid, hm, torch.full_like(hm, -1.0))
    total = torch.where(valid, n0 + n1, torch.full_like(n0, -1))
    first = _first_positions(torch.cat([ch.cls, ch.cls1], -1), c)  # original view first, then reframed
    cand = valid & (hm == hm.amax(-1, keepdim=True))
    tot = torch.where(cand, total, torch.full_like(total, -1))
    cand &= tot == tot.amax(-1, keepdim=True)
    winner = torch.where(cand, first, torch.full_like(first, 2 * n + 1)).argmin(-1)
    return ch.correct_of(winner) * valid.any(-1).double()  # no common answer: no label, counted wrong


def _dual_view_majority(ch: _Chunk) -> Tensor:
    if ch.cls1 is None:
        raise ValueError("method 'dual_view_majority' needs reframed-view rollouts in the pool")
    both = torch.cat([ch.cls, ch.cls1], -1)
    return ch.correct_of(_vote(both, torch.ones_like(both), ch.num_classes))


BON_METHODS.register("hms", ((), _hms))
BON_METHODS.register("dual_view_majority", ((), _dual_view_majority))


def expand_methods(methods: Sequence[str], borda_p: Sequence[float]) -> list[tuple[str, str, dict]]:
    """``[(report_name, registry_name, params)]``; ``self_certainty_borda`` expands to one entry per p."""
    out = []
    for m in methods:
        if m.startswith("self_certainty_borda_p"):
            out.append((m, "self_certainty_borda", {"p": float(m[len("self_certainty_borda_p"):])}))
            continue
        BON_METHODS[m]  # raises with the known names on a typo
        if m == "self_certainty_borda":
            if not borda_p:
                raise ValueError("self_certainty_borda needs at least one --borda-p value")
            out.extend((f"self_certainty_borda_p{p:g}", m, {"p": float(p)}) for p in borda_p)
        else:
            out.append((m, m, {}))
    return out


# ----------------------------------------------------------------------------------------------------
# the protocol


def evaluate_pool(pool, methods: Sequence[str] = DEFAULT_METHODS, cfg: BoNConfig | None = None,
                  progress: bool = True) -> BoNResult:
    """Run the best-of-N protocol on a :class:`~ttrl_lightning.data.pool.RolloutPool`.

    Raises a clear ``ValueError`` when a method needs signals or a view the pool does not have, or when
    ``N`` exceeds the pool size. On ``KeyboardInterrupt`` the budgets finished so far are returned with
    ``complete = False``.
    """
    cfg = cfg or BoNConfig()
    plan = expand_methods(methods, cfg.borda_p)
    r0 = pool.num_rollouts_in_view(0)
    r1 = pool.num_rollouts_in_view(1) if pool.has_reframed else 0
    need_views = any(reg in ("hms", "dual_view_majority") for _, reg, _ in plan)
    if need_views and r1 == 0:
        raise ValueError("methods 'hms' / 'dual_view_majority' need reframed-view rollouts in the pool")
    needed = set()
    for _, reg, _ in plan:
        needed.update(BON_METHODS[reg][0])
    signal_needs = {"K": ["self_certainty"], "V": ["visual_engagement"], "L": ["logprob", "image_attention"]}
    for key in needed - {"len"}:
        users = [rep for rep, reg, _ in plan if key in BON_METHODS[reg][0]]
        pool.require_signals(signal_needs[key], users[0])
    if "len" in needed and bool((pool.lengths[:, :r0] < 1).any()):
        raise ValueError("method 'min_length' needs token counts (per-token arrays or num_tokens) for every rollout")
    for n in cfg.ns:
        if n > r0 or (need_views and n > r1):
            raise ValueError(f"N={n} exceeds the pool size ({r0} original / {r1} reframed rollouts)")
    scores = rollout_scores(pool, cfg.lookback_alpha, cfg.lookback_lambda)
    need_z = "V" in needed

    result = BoNResult(config=cfg)
    q = pool.num_questions
    num_classes = pool.class_correct.shape[1]
    # fixed subsets, one generator per budget: identical whatever the chunking or the method list
    subsets = {}
    for n in cfg.ns:
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + n)
        subsets[n] = (draw_subsets(q, r0, n, cfg.subsets, gen),
                      draw_subsets(q, r1, n, cfg.subsets, gen) if need_views else None)
    acc = {rep: {n: torch.zeros(q, dtype=torch.float64) for n in cfg.ns} for rep, _, _ in plan}
    bar = progress_bar(total=q, desc="best-of-N", enabled=progress)
    done = 0
    try:
        for start in range(0, q, cfg.chunk_questions):
            sl = slice(start, min(q, start + cfg.chunk_questions))
            tokens = (SortedTokens.build(pool.signals["self_certainty"][sl, :r0], pool.lengths[sl, :r0])
                      if need_z else None)
            chunk_scores = {k: v[sl] for k, v in scores.items()}
            for n in cfg.ns:
                idx = subsets[n][0][sl]
                cls = pool.answer_class[sl, 0].gather(1, idx.flatten(1)).view_as(idx)
                cls1 = None
                if subsets[n][1] is not None:
                    idx1 = subsets[n][1][sl]
                    cls1 = pool.answer_class[sl, 1].gather(1, idx1.flatten(1)).view_as(idx1)
                chunk = _Chunk(idx=idx, cls=cls, cls1=cls1, correct_cls=pool.class_correct[sl],
                               no_answer=pool.no_answer_class[sl], num_classes=num_classes,
                               scores=chunk_scores, tokens=tokens, cfg=cfg)
                for rep, reg, params in plan:
                    acc[rep][n][sl] = BON_METHODS[reg][1](chunk, **params).mean(-1)
            done = sl.stop
            bar.update(sl.stop - sl.start)
    except KeyboardInterrupt:
        result.complete = False
    finally:
        bar.close()
    # on interrupt, keep the questions finished so far (all budgets and methods are complete for them)
    result.per_question = {rep: {n: v[:done] for n, v in per_n.items()} for rep, per_n in acc.items()}
    result.num_questions = done
    return result

"""The best-of-N methods (VisConf Table 1), one registry entry each, vectorised over questions and subsets.

Each :class:`BoNMethod` says what it decides with and what it needs, so the evaluation loop and the
per-question reference read these fields instead of testing method names:

===========================  ===================  =========  =====  =========================================
method                       rule                 score      views  source
===========================  ===================  =========  =====  =========================================
``first``                    expected accuracy    --         1      one random rollout
``oracle``                   any correct          --         1      upper bound
``majority``                 ``majority``         --         1      Self-Consistency
``self_certainty``           ``top1``             ``K``      1      Kang et al. 2025
``self_certainty_borda``     ``borda`` (``p``)    ``K``      1      Kang et al. 2025; one entry per exponent
``lookback``                 ``top1``             ``L``      1      LookBack
``lookback_rwc``             ``rwc``              ``L``      1      VisConf sec. 5 on LookBack's score
``visconf``                  ``top1``             ``Z``      1      VisConf sec. 4
``visconf_rwc``              ``rwc``              ``Z``      1      VisConf sec. 5
``visconf_wc``               ``wc``               ``Z``      1      VisConf sec. 7.2 (ablation)
``visconf_v_only``           ``top1``             ``V``      1      VisConf sec. 7.2 (ablation: ``V`` alone)
``visconf_vk_uncalibrated``  ``top1``             ``V K``    1      VisConf sec. 7.2 (ablation: raw ``K``)
``visconf_token_fusion``     ``top1``             ``vc``     1      VisConf sec. 7.2 (``mean_t v_t c_t``)
``min_length``               ``top1`` on ``-n``   ``len``    1      baseline
``hms``                      ``hms``              --         2      Self-Harmony
``dual_view_majority``       majority of both     --         2      Self-Harmony's baseline
===========================  ===================  =========  =====  =========================================

Rules are those of :mod:`ttrl_lightning.consensus` with the same tie rules (top-1 ties -> lowest rollout
index, vote ties -> the answer whose earliest supporting rollout has the lowest index). A method with a
``param`` is swept: ``self_certainty_borda`` gives one report entry ``self_certainty_borda_p{p}`` per value
of ``BoNConfig.borda_p``, and ``self_certainty_borda_p1.5`` names one such entry directly (the value must be
a finite number > 0). A name that is neither raises :class:`UnknownMethodError` naming it and the known
methods: a :class:`~ttrl_lightning.errors.UserError` (``ttrl bon`` prints one line and exits 1) that is also a
``KeyError``, the registry's convention.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from ttrl_lightning.consensus.ranks import borda_from_counts
from ttrl_lightning.errors import UserError
from ttrl_lightning.registry import Registry
from ttrl_lightning.eval.bon.chunk import QuestionChunk
from ttrl_lightning.eval.bon.config import BoNConfig
from ttrl_lightning.eval.bon.rollout_scores import ROLLOUT_SCORES
from ttrl_lightning.eval.bon.token_fusion import FusionTokens, calibrated_token_fusion_means
from ttrl_lightning.eval.bon.votes import first_positions, rwc_numerators, vote

__all__ = ["BoNMethod", "BON_METHODS", "DEFAULT_METHODS", "VISCONF_ABLATIONS", "PlannedMethod",
           "UnknownMethodError",
           "expand_methods"]

DEFAULT_METHODS = ("first", "oracle", "majority", "self_certainty", "self_certainty_borda", "lookback",
                   "lookback_rwc", "visconf_top1", "visconf_rwc", "visconf_wc", "min_length", "hms",
                   "dual_view_majority")
#: VisConf sec. 7.2's score ablations (Table 2), evaluated when named in ``--methods``
VISCONF_ABLATIONS = ("visconf_v_only", "visconf_vk_uncalibrated", "visconf_token_fusion")


@dataclass(frozen=True)
class BoNMethod:
    """One best-of-N method.

    ``correct(chunk, **params) -> [Qc, S]`` correctness in [0, 1] per subset (vectorised);
    ``rule``: the decision it applies -- a :data:`~ttrl_lightning.consensus.CONSENSUS` rule, a two-view rule
    (``hms``, ``dual_view_majority``) or a pool statistic (``first``, ``oracle``);
    ``score``: the per-rollout score it ranks or weights by (a key of
    :data:`~.rollout_scores.ROLLOUT_SCORES`), or ``None``;
    ``needs_views``: it reads the reframed view's rollouts too (``N`` then counts rollouts per view);
    ``param`` / ``sweep``: the keyword of ``correct`` that is swept, and the :class:`~.config.BoNConfig` field
    holding its values (one report entry ``{name}_{param}{value:g}`` each);
    ``inputs``: other per-rollout scores it reads besides ``score`` (``visconf_vk_uncalibrated``: ``V``);
    ``token_signals``: per-token pool signals it reads token by token (``QuestionChunk.cache[("tokens",
    name)]``, ``[Qc, R, T]`` original view), which also makes the chunk build the self-certainty
    calibration (``calibrates_subsets``).
    """

    name: str
    correct: Callable[..., Tensor]
    rule: str
    score: str | None = None
    needs_views: bool = False
    param: str | None = None
    sweep: str | None = None
    inputs: tuple[str, ...] = ()
    token_signals: tuple[str, ...] = ()

    @property
    def signals(self) -> tuple[str, ...]:
        """Per-token pool signals the method needs (those of its scores and its token signals)."""
        keys = ((self.score,) if self.score else ()) + self.inputs
        names = [n for key in keys for n in ROLLOUT_SCORES[key].signals] + list(self.token_signals)
        return tuple(dict.fromkeys(names))

    @property
    def needs_token_counts(self) -> bool:
        """Whether every rollout must have a token count (``min_length``)."""
        return bool(self.score) and ROLLOUT_SCORES[self.score].needs_token_counts

    @property
    def calibrates_subsets(self) -> bool:
        """Whether its score is recomputed inside every subset (VisConf's ``Z``)."""
        return bool(self.token_signals) or (bool(self.score) and ROLLOUT_SCORES[self.score].per_subset)


#: ``name -> BoNMethod``
BON_METHODS: Registry[BoNMethod] = Registry("best-of-N method")


def _register(name: str, correct: Callable[..., Tensor], rule: str, score: str | None = None,
              **fields) -> None:
    BON_METHODS.register(name, BoNMethod(name, correct, rule, score, **fields))


def _top1(ch: QuestionChunk, score: Tensor) -> Tensor:
    pos = score.argmax(-1, keepdim=True)  # first maximum = lowest original index
    return ch.correct_of(ch.cls.gather(2, pos).squeeze(-1))


def _vote_correct(ch: QuestionChunk, weights: Tensor) -> Tensor:
    if "first" not in ch.cache:
        ch.cache["first"] = first_positions(ch.cls, ch.num_classes)
    return ch.correct_of(vote(ch.cls, weights, ch.num_classes, ch.cache["first"]))


def _rwc_correct(ch: QuestionChunk, name: str) -> Tensor:
    return _vote_correct(ch, rwc_numerators(*ch.ranks(name)))


_register("first", lambda ch: ch.member_correct().mean(-1), "first")
_register("oracle", lambda ch: ch.member_correct().amax(-1), "oracle")
_register("majority", lambda ch: _vote_correct(ch, torch.ones_like(ch.cls)), "majority")
_register("self_certainty", lambda ch: _top1(ch, ch.score("K")), "top1", "K")
_register("self_certainty_borda", lambda ch, p: _vote_correct(ch, borda_from_counts(*ch.ranks("K"), p)),
          "borda", "K", param="p", sweep="borda_p")
_register("lookback", lambda ch: _top1(ch, ch.score("L")), "top1", "L")
_register("lookback_rwc", lambda ch: _rwc_correct(ch, "L"), "rwc", "L")
# top-1 by Z, named apart from the ``visconf`` pseudo-labeler (RWC over Z: ``visconf_rwc`` here)
_register("visconf_top1", lambda ch: _top1(ch, ch.score("Z")), "top1", "Z")
_register("visconf_rwc", lambda ch: _rwc_correct(ch, "Z"), "rwc", "Z")
_register("visconf_wc", lambda ch: _vote_correct(ch, ch.score("Z")), "wc", "Z")
_register("min_length", lambda ch: _top1(ch, -ch.score("len")), "top1", "len")


def _token_fusion(ch: QuestionChunk) -> Tensor:
    """``[Qc, S, N]`` ``mean_t v_t c_t`` with ``c`` calibrated inside each subset (:mod:`.token_fusion`)."""
    if "token_fusion" not in ch.cache:
        if "fusion_tokens" not in ch.cache:
            k, v = ch.cache[("tokens", "self_certainty")], ch.cache[("tokens", "visual_engagement")]
            ch.cache["fusion_tokens"] = FusionTokens.build(k, v, ch.tokens.lengths)
        ch.cache["token_fusion"] = calibrated_token_fusion_means(ch.cache["fusion_tokens"], ch.tokens, ch.idx,
                                                                 ch.cfg.calibration_eps)
    return ch.cache["token_fusion"]


# VisConf sec. 7.2's score ablations under top-1 selection
_register("visconf_v_only", lambda ch: _top1(ch, ch.score("V")), "top1", "V")
_register("visconf_vk_uncalibrated", lambda ch: _top1(ch, ch.score("V") * ch.score("K")), "top1", "K",
          inputs=("V",))
_register("visconf_token_fusion", lambda ch: _top1(ch, _token_fusion(ch)), "top1",
          token_signals=("self_certainty", "visual_engagement"))


def _hms(ch: QuestionChunk) -> Tensor:
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
    first = first_positions(torch.cat([ch.cls, ch.cls1], -1), c)  # original view first, then reframed
    cand = valid & (hm == hm.amax(-1, keepdim=True))
    tot = torch.where(cand, total, torch.full_like(total, -1))
    cand &= tot == tot.amax(-1, keepdim=True)
    winner = torch.where(cand, first, torch.full_like(first, 2 * n + 1)).argmin(-1)
    return ch.correct_of(winner) * valid.any(-1).double()  # no common answer: no label, counted wrong


def _dual_view_majority(ch: QuestionChunk) -> Tensor:
    if ch.cls1 is None:
        raise ValueError("method 'dual_view_majority' needs reframed-view rollouts in the pool")
    both = torch.cat([ch.cls, ch.cls1], -1)
    return ch.correct_of(vote(both, torch.ones_like(both), ch.num_classes))


_register("hms", _hms, "hms", needs_views=True)
_register("dual_view_majority", _dual_view_majority, "dual_view_majority", needs_views=True)


class PlannedMethod(NamedTuple):
    """One report entry: its ``report`` name, the registered ``method`` and the keyword ``params`` of its
    ``correct`` (a swept method's value)."""

    report: str
    method: BoNMethod
    params: dict


class UnknownMethodError(UserError, KeyError):
    """A method name that is not registered, or a swept entry whose value is not a finite number > 0.

    A :class:`~ttrl_lightning.errors.UserError` for the CLI and a ``KeyError`` like every registry lookup;
    its text is the message itself (not ``KeyError``'s quoted repr)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _known() -> str:
    swept = [f"{BON_METHODS[m].name}_{BON_METHODS[m].param}<value>" for m in BON_METHODS
             if BON_METHODS[m].param is not None]
    return ", ".join(BON_METHODS.names() + swept)


def _swept_entry(name: str) -> PlannedMethod | None:
    """``{method}_{param}{value}`` (e.g. ``self_certainty_borda_p1.5``) as one entry of a swept method;
    ``None`` when ``name`` starts with no swept method's prefix. A value that is not a finite number > 0
    raises :class:`UnknownMethodError`."""
    for registered in BON_METHODS:
        method = BON_METHODS[registered]
        prefix = f"{method.name}_{method.param}"
        if method.param is None or not name.startswith(prefix):
            continue
        text = name[len(prefix):]
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise UnknownMethodError(
                f"unknown best-of-N method {name!r}: {text!r} after {prefix!r} is not a finite number > 0 "
                f"(e.g. {prefix}0.7); known: {_known()}")
        return PlannedMethod(name, method, {method.param: value})
    return None


def expand_methods(methods: Sequence[str], cfg: BoNConfig) -> list[PlannedMethod]:
    """The report entries of ``methods``: a swept method expands to one entry per value of its config field
    (``self_certainty_borda`` -> ``self_certainty_borda_p{p}`` for every ``cfg.borda_p``); an unknown name
    raises :class:`UnknownMethodError` (a ``KeyError`` and a ``UserError``) listing the known ones."""
    out = []
    for name in methods:
        if name not in BON_METHODS:
            entry = _swept_entry(name)
            if entry is None:
                raise UnknownMethodError(f"unknown best-of-N method {name!r}; known: {_known()}")
            out.append(entry)
            continue
        method = BON_METHODS[name]
        if method.sweep is None:
            out.append(PlannedMethod(name, method, {}))
            continue
        values = getattr(cfg, method.sweep)
        if not values:
            raise UserError(f"{name} needs at least one --{method.sweep.replace('_', '-')} value")
        out.extend(PlannedMethod(f"{name}_{method.param}{v:g}", method, {method.param: float(v)})
                   for v in values)
    return out

"""``visconf``: Rank-Weighted Consensus over VisConf's rollout quality (VisConf sec. 4 and 5).

For the question's ``N`` rollouts (all views pooled):

1. calibrated confidence ``c_{i,t}`` from the token self-certainty of all rollouts pooled
   (``signals.calibrate_confidence``, sec. 4.1);
2. quality ``Z_i = V_i C_i`` (sec. 4.2; ``V_i^a C_i^(1-a)`` with ``alpha=a``, appendix D) with ``V_i`` the
   mean visual engagement and ``C_i`` the mean calibrated confidence (``signals.visconf_score``);
3. RWC (sec. 5): ranks ``r_i`` of ``Z`` (ties averaged), votes ``Vote(a) = sum_i 1[y_i=a] (N-r_i)/(N-1)``,
   ``y* = argmax_a Vote(a)`` (``consensus.aggregate(..., "rwc")``, tie rule: earliest supporting rollout).

Reward ``r_i = 1[y_i = y*]``; an unextractable winner abstains (all rewards 0).

Text-only rollouts (no ``visual_engagement`` on any rollout): ``Z_i = C_i``, calibrated self-certainty
alone, and ``info["signal"] = "self_certainty_only"`` (else ``"visconf"``). ``visual_engagement`` on some
rollouts but not all is an error, as is a missing ``self_certainty``.
"""
from __future__ import annotations

from ..answers import NO_ANSWER
from ..consensus import aggregate
from ..signals import calibrate_confidence, visconf_score
from .pseudo_label import PSEUDO_LABELERS, PseudoLabel
from .pseudo_label import PseudoLabelError
from .rollouts import question_votes
from .question_votes import matches

__all__ = ["visconf_label"]


@PSEUDO_LABELERS.register("visconf")
def visconf_label(votes, *, choices=None, alpha: float | None = None,
                  eps: float = 1e-6) -> PseudoLabel:
    """VisConf + RWC pseudo-label; see the module docstring. ``alpha``: ``None`` for ``Z = V C``."""
    group = question_votes(votes, choices, "visconf")
    n = len(group)
    sc = group.token_signals("self_certainty", "visconf")
    have_v = group.has("visual_engagement")
    if any(have_v) and not all(have_v):
        j = have_v.index(False)
        raise PseudoLabelError(f"visconf: rollouts[{j}].visual_engagement is missing while other rollouts "
                               "have it; give it for every rollout or for none (text-only)")
    cal = calibrate_confidence(sc, eps=eps)
    if all(have_v):
        signal = "visconf"
        scores = []
        for j in range(n):
            v = group.token_signal(j, "visual_engagement", "visconf")
            if v.shape != cal[j].shape:
                raise PseudoLabelError(f"visconf: rollouts[{j}].visual_engagement has {v.numel()} tokens but "
                                       f"self_certainty has {cal[j].numel()}")
            scores.append(float(visconf_score(v, cal[j], alpha)))
    else:
        signal = "self_certainty_only"
        scores = [float(c.mean()) for c in cal]
    answers = group.answers
    decision = aggregate(answers, "rwc", scores)
    info = {"signal": signal, "scores": scores, "support": dict(decision.support), "margin": decision.margin}
    if decision.answer == NO_ANSWER:
        info["abstain_reason"] = "unextractable answers win the rank-weighted vote"
        return PseudoLabel(None, [0.0] * n, True, info)
    return PseudoLabel(decision.answer, matches(answers, decision.answer), False, info)

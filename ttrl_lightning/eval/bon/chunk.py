"""What a best-of-N method reads: one chunk of questions at one budget ``N``, with per-chunk caches.

Every quantity is a ``[questions, subsets, N]`` tensor: the subset members' answer classes (original view,
and the reframed view for two-view methods), their per-rollout scores gathered from ``[Q, R]``, and
VisConf's ``Z`` recomputed inside every subset (:mod:`.calibration`). Ranks are cached per score, so the
methods of one chunk share them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from ttrl_lightning.consensus.ranks import greater_equal_counts
from ttrl_lightning.eval.bon.calibration import SortedTokens, calibrated_confidence_means
from ttrl_lightning.eval.bon.config import BoNConfig
from ttrl_lightning.eval.bon.rollout_scores import VISCONF_SCORE

__all__ = ["QuestionChunk"]


@dataclass
class QuestionChunk:
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
        """``[Qc, S, N]`` subset scores: a per-rollout score (``K``, ``V``, ``L``, ``len``) of the members, or
        VisConf's ``Z = V C`` (``V^a C^(1-a)`` with ``visconf_alpha = a``), calibrated inside each subset."""
        if name not in self.cache:
            if name == VISCONF_SCORE:
                c = calibrated_confidence_means(self.tokens, self.idx, self.cfg.calibration_eps)
                v = self.score("V")
                a = self.cfg.visconf_alpha
                self.cache[name] = v * c if a is None else v.pow(a) * c.pow(1.0 - a)
            else:
                self.cache[name] = self.scores[name].gather(1, self.idx.flatten(1)).view_as(self.idx)
        return self.cache[name]

    def ranks(self, name: str) -> tuple[Tensor, Tensor]:
        """:func:`~ttrl_lightning.consensus.ranks.greater_equal_counts` of :meth:`score` ``name`` (cached)."""
        key = ("ranks", name)
        if key not in self.cache:
            self.cache[key] = greater_equal_counts(self.score(name))
        return self.cache[key]

    def correct_of(self, winner: Tensor) -> Tensor:
        """``[Qc, S]`` 0/1 correctness of the winning class of every subset."""
        qc, s = winner.shape
        return self.correct_cls.gather(1, winner.reshape(qc, -1)).view(qc, s).double()

    def member_correct(self) -> Tensor:
        """``[Qc, S, N]`` 0/1 correctness of every subset member."""
        return self.correct_cls.gather(1, self.cls.flatten(1)).view_as(self.cls).double()

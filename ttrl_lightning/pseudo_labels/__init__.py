"""Pseudo-labelers for test-time RL: one question's rollouts -> a pseudo-label and one reward per rollout.

``pseudo_label(method, rollouts, **options) -> PseudoLabel``; ``method`` is a name in
:data:`PSEUDO_LABELERS`. Every labeler reads one question's votes as a :class:`~.votes.QuestionVotes` (columns:
canonical answers, texts, views, ``[J, T]`` per-token signals); ``rollouts`` is that group (``TTRLModule``
builds it from the engine's tensors) or a list of pool-schema dicts (:mod:`ttrl_lightning.data.pool_schema`:
``answer`` / ``text`` / ``view`` and optional per-token arrays), read into one by ``rollouts.question_votes``.
Every labeler also takes ``choices`` for multiple-choice answer extraction from dicts.

==================  ===============================================================  ======================
name                label and reward                                                 source
==================  ===============================================================  ======================
``majority``        most frequent answer; ``1[y = y*]`` (optional SCRL gate,          TTRL (:mod:`.majority`)
                    ``max_share`` lock)
``soft_majority``   most frequent answer; ``share(y)`` of the extractable votes         SRT ``soft_reward``
``self_harmony``    HMS over two views; ``R_solve`` and gated ``R_fused``            Self-Harmony
``visconf``         RWC over ``Z = V C``; ``1[y = y*]``                              VisConf sec. 4-5
``pixel``           vote weighted by ``exp(-H) Cal VisFid r``; ``1[y = y*]``         Pixelis sec. 3.2.3
``self_certainty``  no label; mean token self-certainty                              Intuitor
``entropy``         no label; minus mean token entropy                               RENT
``random_reward``   no label; Bernoulli(0.5) per rollout (a control)                 Spurious Rewards
``gold_reward``     the gold answer; ``1[y = gold]`` (a control: it reads gold)      RLVR
``null_reward``     no label; a constant reward (a control: KL and optimizer drift)  --
``format_reward``   no label; ``1[an answer parses]`` (a control)                    --
==================  ===============================================================  ======================

Abstention (``abstain=True``, ``label=None``, all rewards 0): ``majority`` and ``visconf`` when the
unextractable answers win the vote, ``self_harmony`` when no answer is common to both views, ``pixel``
also on a tie, a weighted margin below ``delta`` or a conformal set that is not one answer.
"""
from . import controls, intrinsic, majority, pixel, self_harmony, visconf  # noqa: F401  (register the labelers)
from ..answers.fused_format import FUSED_SECTIONS, fused_format_score, fused_template
from .pseudo_label import PSEUDO_LABELERS, PseudoLabel, PseudoLabelError, pseudo_label
from .pixel import (PixelCalibration, batch_reliability, calibrate_pixel, decisive_token_mask, fit_temperature,
                    pixel_label)
from .rollouts import question_votes
from .self_harmony import DIVERSITY_PENALTIES, js_consistency_penalty, sharpness_penalty
from .question_votes import TokenColumn, QuestionVotes

__all__ = ["PSEUDO_LABELERS", "PseudoLabel", "PseudoLabelError", "pseudo_label", "DIVERSITY_PENALTIES",
           "js_consistency_penalty", "sharpness_penalty", "FUSED_SECTIONS", "fused_format_score",
           "fused_template", "PixelCalibration", "batch_reliability", "calibrate_pixel",
           "decisive_token_mask", "fit_temperature", "pixel_label", "TokenColumn", "QuestionVotes", "question_votes"]

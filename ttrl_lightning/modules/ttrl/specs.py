"""TTRL's grouped options, taken and forwarded whole by ``TTRLModule`` (as ``modules.specs`` holds the options
every RL module shares): ``VotingSpec`` (how a question is labelled from its own votes), ``EvalSpec`` (the
sampled validation) and ``AdvantageSpec`` (how rewards become advantages).

In a config::

    init_args:
      voting: {labeler: self_harmony, num_votes: 16, num_trained: 8, fused_prompt_template: "{prompt} ..."}
      eval: {k: 8}
      advantage: {rule: group}

Each checks itself when built: a value outside its range is a ``UserError`` naming the field (``voting.<field>``,
``eval.<field>``, ``advantage.<field>``).
"""
from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping

from ttrl_lightning.answers import ANSWER_EXTRACTORS
from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.modules.ttrl.labelers import TTRL_LABELERS, labeler_spec
from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS

__all__ = ["VotingSpec", "EvalSpec", "AdvantageSpec", "ADVANTAGES"]

VOTING_RULES: dict[str, Bounds] = {
    "num_votes": Bounds(low=1, integer=True),
    "num_trained": Bounds(low=1, integer=True),
    "warmup_majority_steps": Bounds(low=0, integer=True),
    "gold_budget": Bounds(low=0, high=1),
}


@dataclass(frozen=True)
class VotingSpec:
    """How test-time RL labels a question from its own votes (TTRL sec. 3; Self-Harmony sec. 3; Pixelis 3.2.3).

    labeler: a name in ``pseudo_labels.PSEUDO_LABELERS`` (majority, self_harmony, visconf, pixel,
    self_certainty, entropy, or the controls random_reward, gold_reward); options: its keyword options (e.g.
    ``{"delta": 0.1}`` for pixel) and its calibration's (``LabelerSpec.calibration_options``: pixel's
    ``alpha``); num_votes: M samples per prompt that vote (TTRL: 64); num_trained: N <= M of them trained on,
    the first N of every prompt (TTRL: 32; the samples are i.i.d., so the first N are a uniform draw);
    answer_extractor: how a completion's answer is read (``answers.ANSWER_EXTRACTORS``), the same in the labels
    and in the monitoring; fused_prompt_template: the fused Reframe-and-Solve prompt, ``{prompt}`` replaced by
    the question (required by a labeler that votes over the reframed view, ``self_harmony``);
    warmup_majority_steps: ``self_harmony``'s warm-up (its first steps label by majority over both views; the
    public implementation's default is 20); gold_budget: a label budget (the semi-supervised setting of TraPO
    and RLAVR): the share of the questions, chosen by their id (:func:`budgeted`), that are labelled with their
    gold answer (``gold_reward``'s label and rewards) instead of by ``labeler``; 0: none (label-free).

    It checks itself when built: an unknown labeler, option or extractor, N > M, a fused labeler without its
    template, or a warm-up for a labeler that has none is a ``UserError`` naming the field (``voting.<field>``).
    """

    labeler: str = "majority"
    options: Mapping[str, Any] | None = None
    num_votes: int = 8
    num_trained: int = 4
    answer_extractor: str = "final_answer"
    fused_prompt_template: str | None = None
    warmup_majority_steps: int = 0
    gold_budget: float = 0.0

    def __post_init__(self) -> None:
        check_bounds(asdict(self), VOTING_RULES, "voting.")
        if self.labeler not in PSEUDO_LABELERS:
            raise UserError(f"voting.labeler must be one of {', '.join(PSEUDO_LABELERS.names())}, "
                            f"got {self.labeler!r}")
        spec = labeler_spec(self.labeler)
        object.__setattr__(self, "options", _labeler_options(self.labeler, self.options, spec))
        if self.num_trained > self.num_votes:
            raise UserError(f"voting.num_trained (N={self.num_trained}, the rows trained on) must be <= "
                            f"voting.num_votes (M={self.num_votes}, the rows voting)")
        template = self.fused_prompt_template
        if spec.fused and (not isinstance(template, str) or "{prompt}" not in template):
            raise UserError(f"voting.fused_prompt_template must be a string holding '{{prompt}}' for "
                            f"{self.labeler} (the fused Reframe-and-Solve prompt), got {template!r}")
        if self.answer_extractor not in ANSWER_EXTRACTORS:
            raise UserError(f"voting.answer_extractor must be one of {', '.join(ANSWER_EXTRACTORS.names())}, "
                            f"got {self.answer_extractor!r}")
        if self.warmup_majority_steps and "warmup_majority_steps" not in spec.options:
            owners = [n for n in TTRL_LABELERS if "warmup_majority_steps" in TTRL_LABELERS[n].options]
            raise UserError(f"voting.warmup_majority_steps is an option of {', '.join(owners)}, not "
                            f"{self.labeler}")


def budgeted(question_id: str, share: float) -> bool:
    """Whether question ``question_id`` is in a label budget of ``share``: the first 64 bits of the SHA-256 of
    its id, as a fraction of 2^64, below ``share``. The same questions in every step, epoch, seed and rank (the
    budget is a set of labelled questions, not a draw); about ``share`` of any set of ids."""
    import hashlib

    if share <= 0:
        return False
    return int.from_bytes(hashlib.sha256(str(question_id).encode()).digest()[:8], "big") < share * 2 ** 64


def _labeler_options(name: str, options, spec) -> dict[str, Any]:
    """``options`` as a dict of the labeler's own keyword options (besides the votes and ``choices``) or its
    calibration's: a misspelled option, or a value its spec's ``check_options`` refuses, is refused when the
    spec is built, not at the first step."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise UserError(f"voting.options must be a mapping of {name}'s options, got {options!r}")
    params = inspect.signature(PSEUDO_LABELERS[name]).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        known = [p for p in list(params)[1:] if p != "choices"] + list(spec.calibration_options)
        unknown = [k for k in options if k not in known]
        if unknown:
            raise UserError(f"voting.options: {name} has no option {unknown[0]!r}; its options: "
                            f"{', '.join(known) or 'none'}")
    if spec.check_options is not None:
        try:
            spec.check_options(dict(options))
        except UserError as e:
            raise UserError(f"voting.options: {e}") from None
    return dict(options)


EVAL_RULES: dict[str, Bounds] = {
    "k": Bounds(low=1, integer=True),
    "temperature": Bounds(low=0),
    "top_p": Bounds(low=0, high=1, low_open=True),
}


@dataclass(frozen=True)
class EvalSpec:
    """Validation sampling of test-time RL: ``k`` samples per question and their decoding (avg@k, maj@k,
    pass@k; TTRL evaluates avg@16 at T 0.6, top-p 0.95)."""

    k: int = 4
    temperature: float = 0.6
    top_p: float = 0.95

    def __post_init__(self) -> None:
        check_bounds(asdict(self), EVAL_RULES, "eval.")


#: advantage rules: "group" (GRPO), "ema_baseline" (Pixelis appendix 6) or "fixed" (DDRL's fixed +-1)
ADVANTAGES = ("group", "ema_baseline", "fixed")
ADVANTAGE_RULES: dict[str, Bounds] = {"baseline_momentum": Bounds(low=0, high=1, high_open=True),
                                      "negative_shift": Bounds(low=0)}


@dataclass(frozen=True)
class AdvantageSpec:
    """How test-time RL turns rewards into advantages.

    rule: ``"group"`` (GRPO's group-relative advantage), ``"ema_baseline"`` (Pixelis appendix 6:
    A_j = vbar [r_j - b], b an EMA of the accepted questions' mean reward) or ``"fixed"`` (DDRL's fixed
    advantages: ``A_j = sign(r_j - mean_g r)``, +1 above the group's mean reward, -1 below, 0 in a group of equal
    rewards: GRPO's direction without its std normalisation, under which one dissenter among 16 agreeing votes
    gets -3.87); None: the labeler's default (``LabelerSpec.advantage``: ema_baseline for pixel, else group),
    saved resolved; baseline_momentum: rho of the EMA baseline (Pixelis: 0.99); retrieval: ``{"index": <file>,
    "k": 8, "rho": 0.99, "whitelist": [...]}``, with ema_baseline only: the per-query baseline b(q) and value
    vbar(N(q)) of the question's retrieved neighbours (Pixelis supp. S6; ``modules.ttrl.retrieval``); None: the
    global baseline with vbar = 1.
    negative_shift: RESTRAIN's negative branch, delta >= 0: a question whose votes agree too little to label
    (``PseudoLabel.negative``: ``majority``'s consensus gate, ``min_share`` / ``min_margin``) is trained instead
    of left out, every one of its rows with reward 0 and advantage ``-delta`` (the group's advantages, all 0 for
    equal rewards, shifted by ``-delta``); 0 (default): such a question abstains like any other.
    """

    rule: str | None = None
    baseline_momentum: float = 0.99
    retrieval: Mapping[str, Any] | None = None
    negative_shift: float = 0.0

    def __post_init__(self) -> None:
        check_bounds(asdict(self), ADVANTAGE_RULES, "advantage.")
        if self.rule is not None and self.rule not in ADVANTAGES:
            raise UserError(f"advantage.rule must be one of {', '.join(ADVANTAGES)}, got {self.rule!r}")
        if self.retrieval is not None:
            from ttrl_lightning.modules.ttrl.retrieval import checked_retrieval_options

            if not isinstance(self.retrieval, Mapping) or self.rule not in (None, "ema_baseline"):
                raise UserError(f"advantage.retrieval is a mapping {{index: <file>, k: 8, ...}} for rule "
                                f"ema_baseline (the per-query baseline b(q)), got {self.retrieval!r} with "
                                f"rule {self.rule}")
            checked_retrieval_options(dict(self.retrieval))
            object.__setattr__(self, "retrieval", dict(self.retrieval))

    def resolved(self, labeler: str) -> AdvantageSpec:
        """This spec with ``rule`` None replaced by the labeler's default; retrieval needs ema_baseline."""
        out = self if self.rule is not None else replace(self, rule=labeler_spec(labeler).advantage)
        if out.retrieval is not None and out.rule != "ema_baseline":
            raise UserError(f"advantage.retrieval needs rule ema_baseline (the per-query baseline b(q)), "
                            f"got {out.rule} for {labeler}")
        return out

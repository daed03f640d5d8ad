"""Grouped options of the RL modules, taken and forwarded whole (as ``PolicySpec`` is; litgpt's ``TrainArgs``,
TRL's ``GRPOConfig``): ``SamplingSpec`` (how the training rollouts are decoded) and ``GRPOSpec`` (how GRPO
optimises on them).

In a config::

    init_args:
      policy: {model: tiny:qwen2, lr: 1.0e-3}
      sampling: {temperature: 1.0, max_new_tokens: 64}
      grpo: {kl_coef: 0.01, reference: external}

A spec checks itself when built: a value outside its range raises a ``UserError`` naming the field
(``sampling.top_p``, ``grpo.kl_coef``). A module argument that moved into a spec (``temperature``,
``kl_coef``, ...) is a one-line ``ttrl fit`` error naming its new place (``MOVED_ARGUMENTS``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping, TypeVar

from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.modules.logprobs import LOGPROB_IMPLS
from ttrl_lightning.modules.losses import LOSS_AGGREGATIONS
from ttrl_lightning.rollout.base import check_sampling

__all__ = ["SamplingSpec", "GRPOSpec", "VotingSpec", "EvalSpec", "AdvantageSpec", "CuriosityCoherenceSpec",
           "ADVANTAGES", "REFERENCES", "MOVED_ARGUMENTS", "spec_of"]

#: KL references: a frozen copy of the initial policy, none (no KL term), or one set by a callback (EMAAnchor)
REFERENCES = ("initial", "none", "external")

GRPO_SPEC_RULES: dict[str, Bounds] = {
    "eps_low": Bounds(low=0),
    "eps_high": Bounds(low=0),
    "kl_coef": Bounds(low=0),
    "num_iterations": Bounds(low=1, integer=True),
    "max_grad_norm": Bounds(low=0, optional=True),
    "tis_cap": Bounds(low=0, low_open=True, optional=True),
}


@dataclass(frozen=True)
class SamplingSpec:
    """Decoding of the training rollouts: ``temperature`` (0: greedy), ``top_p``, ``top_k`` (0: off),
    ``max_new_tokens`` (an agent module's budget per turn), ``stop`` strings (cut before them)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 8
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", check_sampling(asdict(self), "sampling."))


@dataclass(frozen=True)
class GRPOSpec:
    """GRPO's optimisation on one rollout batch (DeepSeekMath; Pixelis 3.2.2, appendix 6).

    scale_rewards: divide the group-relative advantage by the group's std; eps_low / eps_high: the clip range;
    kl_coef: the initial beta of the k3 KL term (a ``PIDKLController`` drives it); reference: ``"initial"``
    (frozen copy of the starting policy, checkpointed), ``"external"`` (set by a callback such as
    ``EMAAnchor``) or ``"none"`` (no KL term; kl_coef must be 0); loss_aggregation: ``"seq_mean"`` (GRPO) or
    ``"token_mean"`` (DAPO); num_iterations: optimizer steps per rollout batch (> 1 makes the clip active);
    max_grad_norm (None: no clipping); tis_cap: C of the truncated importance weight of an engine with its own
    weights (None: no correction, the gap is still logged); logprob_impl: ``"auto"``, ``"fused"`` or
    ``"materialized"`` (``GRPOModule.sequence_logprobs``).

    The defaults are GRPO's; ``TTRLModule`` and ``CCRFTModule`` default to their own ``kl_coef`` (0 and 0.1)
    and CC-RFT to ``reference="external"``, which a spec written in full sets explicitly.
    """

    scale_rewards: bool = True
    eps_low: float = 0.2
    eps_high: float = 0.2
    kl_coef: float = 0.04
    reference: str = "initial"
    loss_aggregation: str = "seq_mean"
    num_iterations: int = 1
    max_grad_norm: float | None = 1.0
    tis_cap: float | None = 2.0
    logprob_impl: str = "auto"

    def __post_init__(self) -> None:
        check_bounds(asdict(self), GRPO_SPEC_RULES, "grpo.")
        if self.reference not in REFERENCES:
            raise UserError(f"grpo.reference must be one of {', '.join(REFERENCES)}, got {self.reference!r}")
        if self.reference == "none" and self.kl_coef != 0:
            raise UserError(f"grpo.reference='none' needs grpo.kl_coef=0, got kl_coef={self.kl_coef!r}")
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise UserError(f"grpo.loss_aggregation must be one of {', '.join(LOSS_AGGREGATIONS.names())}, "
                            f"got {self.loss_aggregation!r}")
        if self.logprob_impl not in LOGPROB_IMPLS:
            raise UserError(f"grpo.logprob_impl must be one of {', '.join(LOGPROB_IMPLS)}, "
                            f"got {self.logprob_impl!r}")


VOTING_RULES: dict[str, Bounds] = {
    "num_votes": Bounds(low=1, integer=True),
    "num_trained": Bounds(low=1, integer=True),
    "warmup_majority_steps": Bounds(low=0, integer=True),
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
    public implementation's default is 20).

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

    def __post_init__(self) -> None:
        from ttrl_lightning.answers import ANSWER_EXTRACTORS
        from ttrl_lightning.modules.ttrl.labelers import TTRL_LABELERS, labeler_spec
        from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS

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


def _labeler_options(name: str, options, spec) -> dict[str, Any]:
    """``options`` as a dict of the labeler's own keyword options (besides the votes and ``choices``) or its
    calibration's: a misspelled option is refused when the spec is built, not at the first step."""
    import inspect

    from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS

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
        from ttrl_lightning.modules.ttrl.labelers import labeler_spec

        out = self if self.rule is not None else replace(self, rule=labeler_spec(labeler).advantage)
        if out.retrieval is not None and out.rule != "ema_baseline":
            raise UserError(f"advantage.retrieval needs rule ema_baseline (the per-query baseline b(q)), "
                            f"got {out.rule} for {labeler}")
        return out


CURIOSITY_COHERENCE_RULES: dict[str, Bounds] = {
    "w_correct": Bounds(),
    "w_curiosity": Bounds(),
    "w_coherence": Bounds(),
    "efficiency_penalty": Bounds(low=0),
    "mc_samples": Bounds(low=1, integer=True),
    "mc_dropout": Bounds(low=0, high=1, high_open=True),
    "gate_beta": Bounds(low=0),
    "embed_hidden": Bounds(low=1, integer=True),
    "embed_dim": Bounds(low=1, integer=True),
    "feature_layer": Bounds(integer=True),
    "head_lr": Bounds(low=0),
    "head_weight_decay": Bounds(low=0),
}


@dataclass(frozen=True)
class CuriosityCoherenceSpec:
    """CC-RFT's reward and its two intrinsic terms (Pixelis sec. 3.2.2, appendix 1).

    R = w_correct [answer right] + w_curiosity Cur + w_coherence Coh - efficiency_penalty * max(0, calls - 1)
    (the paper gives no weights; ours: 1, 0.1, 0.1 and Pixel Reasoner's 0.05 per call beyond the first).
    Curiosity: ``mc_samples`` MC-dropout passes (dropout ``mc_dropout``) of the dynamics head, gated by
    ``gate_beta``; g_phi's sizes ``embed_hidden`` (768) and ``embed_dim`` (512); ``feature_layer``: the
    hidden-state layer E_t is read from (-1, the last; the paper's "3rd fusion block from the top" is -3);
    g_phi and h_psi are trained with AdamW at ``head_lr`` (5e-5) and ``head_weight_decay`` (0.01).
    """

    w_correct: float = 1.0
    w_curiosity: float = 0.1
    w_coherence: float = 0.1
    efficiency_penalty: float = 0.05
    mc_samples: int = 4
    mc_dropout: float = 0.1
    gate_beta: float = 5.0
    embed_hidden: int = 768
    embed_dim: int = 512
    feature_layer: int = -1
    head_lr: float = 5e-5
    head_weight_decay: float = 0.01

    def __post_init__(self) -> None:
        check_bounds(asdict(self), CURIOSITY_COHERENCE_RULES, "curiosity_coherence.")


S = TypeVar("S", SamplingSpec, GRPOSpec, VotingSpec, EvalSpec, AdvantageSpec, CuriosityCoherenceSpec)


def spec_of(cls: type[S], value: S | Mapping[str, Any] | None, name: str) -> S:
    """``value`` as a ``cls``: a mapping (a checkpoint's or a YAML file's hyperparameters) is converted, None
    gives the defaults; an unknown field is a ``UserError`` naming it and the known ones."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise UserError(f"unknown {name} field(s) {unknown}; known: {', '.join(known)}")
        return cls(**dict(value))
    raise UserError(f"{name} must be a {cls.__name__} or a mapping, got {type(value).__name__}")


#: former flat module arguments -> their place now
MOVED_ARGUMENTS: dict[str, str] = {
    **{f.name: f"sampling.{f.name}" for f in fields(SamplingSpec)},
    **{f.name: f"grpo.{f.name}" for f in fields(GRPOSpec)},
    "max_turn_tokens": "sampling.max_new_tokens",  # CC-RFT's per-turn budget
    # TTRLModule
    "pseudo_labeler": "voting.labeler",
    "labeler_kwargs": "voting.options",
    "num_votes": "voting.num_votes",
    "num_generations": "voting.num_trained",  # GRPO and CC-RFT keep theirs; TTRL's N is voting's
    "answer_extractor": "voting.answer_extractor",
    "fused_prompt_template": "voting.fused_prompt_template",
    "warmup_majority_steps": "voting.warmup_majority_steps",
    "eval_k": "eval.k",
    "eval_temperature": "eval.temperature",
    "eval_top_p": "eval.top_p",
    "baseline_momentum": "advantage.baseline_momentum",
    "retrieval": "advantage.retrieval",
    # CCRFTModule
    **{f.name: f"curiosity_coherence.{f.name}" for f in fields(CuriosityCoherenceSpec)},
}

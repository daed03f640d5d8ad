"""Grouped options of the RL modules, taken and forwarded whole (as ``PolicySpec`` is; litgpt's ``TrainArgs``,
TRL's ``GRPOConfig``): ``SamplingSpec`` (how the training rollouts are decoded) and ``GRPOSpec`` (how GRPO
optimises on them); TTRL's own specs (voting, evaluation, advantage) are ``modules.ttrl.specs``.

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

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, TypeVar

from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.modules.logprobs import LOGPROB_IMPLS
from ttrl_lightning.modules.losses import LOSS_AGGREGATIONS
from ttrl_lightning.rollout.base import check_sampling

__all__ = ["SamplingSpec", "GRPOSpec", "CuriosityCoherenceSpec", "REFERENCES", "REFERENCE_STORAGES", "MOVED_ARGUMENTS",
           "spec_of"]

#: KL references: a frozen copy of the initial policy, none (no KL term), or one set by a callback (EMAAnchor)
REFERENCES = ("initial", "none", "external")
#: where the initial reference's parameters live between reference passes (``modules.disk_weights``)
REFERENCE_STORAGES = ("memory", "disk")

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
    ``EMAAnchor``) or ``"none"`` (no KL term; kl_coef must be 0); reference_storage: ``"memory"`` or ``"disk"``
    (the initial reference's parameters in a file between reference passes, ``modules.disk_weights``: the same
    log-probs, one copy of the policy less resident at the optimizer step); loss_aggregation: ``"seq_mean"`` (GRPO) or
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
    reference_storage: str = "memory"
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
        if self.reference_storage not in REFERENCE_STORAGES:
            raise UserError(f"grpo.reference_storage must be one of {', '.join(REFERENCE_STORAGES)}, "
                            f"got {self.reference_storage!r}")
        if self.reference_storage == "disk" and self.reference != "initial":
            raise UserError(f"grpo.reference_storage='disk' keeps the initial reference on disk; grpo.reference is "
                            f"{self.reference!r}")
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise UserError(f"grpo.loss_aggregation must be one of {', '.join(LOSS_AGGREGATIONS.names())}, "
                            f"got {self.loss_aggregation!r}")
        if self.logprob_impl not in LOGPROB_IMPLS:
            raise UserError(f"grpo.logprob_impl must be one of {', '.join(LOGPROB_IMPLS)}, "
                            f"got {self.logprob_impl!r}")


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


S = TypeVar("S")


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

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

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, TypeVar

from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.base import Bounds, check_bounds
from ttrl_lightning.modules.logprobs import LOGPROB_IMPLS
from ttrl_lightning.modules.losses import LOSS_AGGREGATIONS

__all__ = ["SamplingSpec", "GRPOSpec", "REFERENCES", "MOVED_ARGUMENTS", "spec_of"]

#: KL references: a frozen copy of the initial policy, none (no KL term), or one set by a callback (EMAAnchor)
REFERENCES = ("initial", "none", "external")

SAMPLING_RULES: dict[str, Bounds] = {
    "temperature": Bounds(low=0),
    "top_p": Bounds(low=0, high=1, low_open=True),
    "top_k": Bounds(low=0, integer=True),
    "max_new_tokens": Bounds(low=1, integer=True),
}
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
        check_bounds(asdict(self), SAMPLING_RULES, "sampling.")
        stop = self.stop
        if isinstance(stop, str) or not all(isinstance(s, str) and s for s in stop):
            raise UserError(f"sampling.stop must be a list of non-empty strings, got {stop!r}")
        object.__setattr__(self, "stop", tuple(stop))


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


S = TypeVar("S", SamplingSpec, GRPOSpec)


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
}

"""Shared LightningModule plumbing: the policy spec, the policy model, its tokenizer and the optimizer."""
from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Mapping

import lightning.pytorch as pl
import torch

from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.models import check_tiny_name, image_settings, load_model, load_processor, load_tokenizer
from ttrl_lightning.modules.fsdp import shard_policy


#: torch dtype names a policy's weights may be cast to (``PolicySpec.dtype``)
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16", "float64")
#: ``PolicySpec``'s numeric fields and their bounds (AdamW: a positive step size, non-negative decay)
POLICY_RULES: dict[str, Bounds] = {
    "lr": Bounds(low=0, low_open=True),
    "weight_decay": Bounds(low=0),
    "seed": Bounds(integer=True),
    "warmup_ratio": Bounds(low=0, high=1, high_open=True),
}


def full_precision(device: torch.device):
    """A context in which ``torch.autocast`` is off on ``device``: what runs inside it (labelling, rewards, a
    consensus EM's ``bmm``) computes in the dtype of its inputs under a ``bf16-mixed`` trainer too."""
    if device.type in ("cpu", "cuda"):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


def _constant(progress: float) -> float:
    return 1.0


def _cosine(progress: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))


def _linear(progress: float) -> float:
    return max(0.0, 1.0 - progress)


#: learning-rate schedule after the warm-up: ``name -> multiplier(progress in [0, 1])``
LR_SCHEDULES: dict[str, Any] = {"constant": _constant, "cosine": _cosine, "linear": _linear}


def lr_multiplier(schedule: str, step: int, total_steps: int, warmup_steps: int) -> float:
    """The learning-rate factor of optimizer step ``step`` (0-based): linear warm-up from ``1/warmup_steps``
    to 1 over ``warmup_steps`` steps, then ``LR_SCHEDULES[schedule]`` of the progress
    ``(step - warmup) / (total - warmup)`` (cosine: ``(1 + cos(pi p)) / 2``, decaying to 0 at the end; the
    TTRL recipe's "lr 5e-7 cosine, warm-up 3%")."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    return LR_SCHEDULES[schedule]((step - warmup_steps) / span)
#: each of AdamW's two ``betas`` (moment decay rates)
BETA_BOUNDS = Bounds(low=0, high=1, high_open=True)


@dataclass(frozen=True)
class PolicySpec:
    """What every training phase needs to build and optimise the policy.

    model: ``"tiny:<arch>"`` (random tiny model of a real architecture, CPU runs) or a local checkpoint path;
    tiny_kwargs: sizes of a tiny model (``hidden``, ``layers``, ...); lora: PEFT ``LoraConfig`` keyword
    arguments (None: full fine-tuning); dtype: torch dtype name of the weights (None: the checkpoint's);
    lr, weight_decay, betas: AdamW; lr_schedule (``constant``, ``cosine``, ``linear``) and warmup_ratio (share
    of the run's optimizer steps warming up linearly), stepped once per training batch (``lr_multiplier``);
    seed: initialisation of a tiny model and the root of every derived seed
    of the module (``seeding.derive_seed``); activation_checkpointing: keep only each decoder layer's input
    through the forward with gradients and recompute the layer in the backward (transformers'
    ``gradient_checkpointing_enable``, non-reentrant): the same values and gradients for one more forward's
    time, the activations' memory cut to one layer's (SmolLM2-135M, 32 rows: about 4 GB to a few hundred MB;
    ``benchmarks/training/ttrl_step_breakdown.py``). Sampling and the no-grad passes run in eval mode or without
    gradients and are not affected.

    In a config: ``init_args: {policy: {model: tiny:qwen2, lr: 1.0e-3}, <the module's own arguments>}``.
    A spec checks itself when built (``POLICY_RULES``, ``BETA_BOUNDS``, ``SUPPORTED_DTYPES``): a value
    outside its range raises :class:`~ttrl_lightning.errors.UserError` naming the field (``policy.lr``).
    """

    model: str = "tiny:qwen2"
    tiny_kwargs: dict[str, Any] | None = None
    lora: dict[str, Any] | None = None
    dtype: str | None = None
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    lr_schedule: str = "constant"
    warmup_ratio: float = 0.0
    seed: int = 0
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise UserError(f"policy.model must be a model name or path, got {self.model!r}")
        check_tiny_name(self.model, "policy.model")
        check_bounds(asdict(self), POLICY_RULES, "policy.")
        betas = tuple(self.betas) if isinstance(self.betas, (list, tuple)) else (self.betas,)
        if len(betas) != 2 or any(b not in BETA_BOUNDS for b in betas):
            raise UserError(f"policy.betas must be two numbers {BETA_BOUNDS}, got {self.betas!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise UserError(f"policy.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, "
                            f"got {self.lr_schedule!r}")
        if not isinstance(self.activation_checkpointing, bool):
            raise UserError(f"policy.activation_checkpointing must be true or false, "
                            f"got {self.activation_checkpointing!r}")
        if self.dtype is not None and self.dtype not in SUPPORTED_DTYPES:
            raise UserError(f"policy.dtype must be one of {', '.join(SUPPORTED_DTYPES)} or null, "
                            f"got {self.dtype!r}")

    @classmethod
    def of(cls, spec: PolicySpec | Mapping[str, Any] | None) -> PolicySpec:
        """``spec`` as a ``PolicySpec``: a mapping (a checkpoint's or a YAML file's hyperparameters) is
        converted, None gives the defaults."""
        if spec is None:
            return cls()
        if isinstance(spec, cls):
            return spec
        if isinstance(spec, Mapping):
            known = set(cls.__dataclass_fields__)
            if set(spec) - known:
                raise TypeError(f"unknown policy field(s) {sorted(set(spec) - known)}; "
                                f"known: {sorted(known)}")
            spec = dict(spec)
            if "betas" in spec:
                spec["betas"] = tuple(spec["betas"])
            return cls(**spec)
        raise TypeError(f"policy must be a PolicySpec or a mapping, got {type(spec).__name__}")


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer in the backward instead of keeping its activations (transformers'
    non-reentrant checkpointing); a model that cannot is one ``UserError``. Under LoRA the inputs must carry
    gradients for the frozen base's checkpointed layers to reach the adapters (``enable_input_require_grads``)."""
    if not getattr(model, "supports_gradient_checkpointing", False):  # a PeftModel answers for its base model
        raise UserError(f"policy.activation_checkpointing: {type(model).__name__} does not support it")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(model, "enable_input_require_grads") and hasattr(model, "peft_config"):
        model.enable_input_require_grads()


class PolicyModule(pl.LightningModule):
    """Holds ``self.policy`` (a transformers causal LM, optionally with LoRA), ``self.tokenizer`` and
    ``self.policy_spec`` (the ``PolicySpec`` they were built from).

    The model is built in ``configure_model`` so sharded strategies (FSDP) can build it in their context.
    This class saves the hyperparameters of the whole subclass chain (``save_hyperparameters`` collects the
    ``__init__`` arguments of every class in it): a subclass only adds its own arguments, and lists those
    that cannot be saved (callables, engines) in ``unsaved_init_args``. The policy is saved as a plain
    mapping, so checkpoints load with ``torch.load(weights_only=True)`` and reload through
    ``load_from_checkpoint``.
    """

    #: ``__init__`` arguments left out of the saved hyperparameters (objects, not configuration)
    unsaved_init_args: ClassVar[tuple[str, ...]] = ()

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """``nn.Module.load_state_dict``; weights of another architecture (a resume with
        ``--allow_hparam_override`` onto another model) are one ``UserError`` instead of torch's list of every
        mismatched tensor."""
        try:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        except RuntimeError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            if not lines or not lines[0].startswith("Error(s) in loading state_dict"):
                raise
            detail = lines[1] if len(lines) > 1 else lines[0]
            raise UserError(f"the checkpoint's weights do not fit the model this run builds ({detail[:200]})") \
                from None

    @classmethod
    def resolved_hparams(cls, init_args: dict) -> dict:
        """``init_args`` as this class saves them in its hyperparameters (a subclass that saves a resolved
        default instead of the given ``None`` says so here), so a resume compares like with like."""
        return dict(init_args)

    def __init__(self, policy: PolicySpec = PolicySpec()):
        super().__init__()
        self.policy_spec = PolicySpec.of(policy)
        self.save_hyperparameters(ignore=list(self.unsaved_init_args))
        self.save_hyperparameters({"policy": asdict(self.policy_spec)})
        self.tokenizer = load_tokenizer(self.policy_spec.model)
        self.policy: torch.nn.Module | None = None

    @property
    def processor(self):
        """The policy's processor (``models.load_processor``: a vision-language model's), None for a text-only
        model; loaded on first use."""
        if "_processor" not in self.__dict__:
            self.__dict__["_processor"] = load_processor(self.policy_spec.model)
        return self.__dict__["_processor"]

    def image_settings(self) -> dict[str, Any] | None:
        """How the processor shows an image to the policy (``models.image_settings``); None for a text model (no
        vision config: its processor is never loaded here)."""
        config = getattr(self.policy, "config", None)
        if not hasattr(config, "vision_config") or self.processor is None:
            return None
        return image_settings(self.processor)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """A vision-language run's image settings go into its checkpoint, to be compared on resume."""
        settings = self.image_settings()
        if settings is not None:
            checkpoint["image_settings"] = settings

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Refuse (``UserError``) a resume whose processor shows images otherwise than the run did (other pixel
        bounds, patch or merge size): the policy would be trained on image tokens it was never sampled with."""
        saved, now = checkpoint.get("image_settings"), self.image_settings()
        if saved is None or now is None or saved == now:
            return
        changed = ", ".join(f"{k}: checkpoint {saved.get(k)!r}, this run {now.get(k)!r}"
                            for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k))
        raise UserError(f"the checkpoint's run showed images with other settings than {self.policy_spec.model}'s "
                        f"processor does now ({changed}); resume with the processor the run had")

    def configure_model(self) -> None:
        if self.policy is not None:
            return
        s = self.policy_spec
        self.policy = load_model(s.model, self.tokenizer, tiny_kwargs=s.tiny_kwargs, lora=s.lora,
                                 dtype=s.dtype, seed=s.seed)
        if s.activation_checkpointing:
            enable_activation_checkpointing(self.policy)
        self.policy.train()  # from_pretrained returns eval mode; the trainer expects train mode
        if self.device_mesh is not None:  # Lightning's ModelParallelStrategy (FSDP2): shard it here
            shard_policy(self.policy, self.device_mesh)

    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the policy has no trainable parameters")
        s = self.policy_spec
        opt = torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay, betas=tuple(s.betas))
        if s.lr_schedule == "constant" and s.warmup_ratio == 0:
            return opt
        total = self.trainer.estimated_stepping_batches
        if not math.isfinite(total) or total <= 0:
            raise UserError(f"policy.lr_schedule={s.lr_schedule!r} needs a finite run: set trainer.max_steps or "
                            "trainer.max_epochs")
        total = int(total)
        warmup = math.ceil(s.warmup_ratio * total)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: lr_multiplier(s.lr_schedule, step, total, warmup))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

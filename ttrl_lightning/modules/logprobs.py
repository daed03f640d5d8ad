"""Per-token log-probabilities of a causal LM for the training losses, without ``[B, T, V]`` logits when the
LM head is a plain linear layer.

For targets ``y [B, K]`` (the last K tokens of the input, or labels; negative = no label) predicted by the K
positions before them, with the model's final hidden states ``h`` and its head ``W [V, H]`` (bias ``b``):

    fused:        logprob = linear_logprobs(h[:, -K-1:-1], W, y, T, b)         (ops.linear_logprobs)
    materialized: logprob = log_softmax(model(...).logits[:, -K-1:-1] / T)[y]

Both are the same number: ``log p(y_t | y_<t)`` at temperature ``T``. The fused path runs the base model
(reached as ``integrations.scoring`` reaches it, through a PEFT wrapper) and walks the vocabulary in chunks,
so neither pass holds ``[B, K, V]`` logits (docs/training.md, "Memory of the log-prob pass"). It needs a
head that the model applies as ``h W^T + b`` and nothing more; :func:`fused_unsupported_reason` names what
rules a model out (logit soft-capping or scaling in its config, a head that is not a plain
``torch.nn.Linear``, e.g. with LoRA adapters on it, hooks on the head, FSDP-sharded parameters).

``LogprobPath`` is a module's choice (``logprob_impl``): ``"auto"`` uses the fused path where it is exact
and otherwise the materialised one with a logged notice (once per module and reason), ``"fused"`` raises a
``UserError`` naming the reason, ``"materialized"`` always builds the logits.
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from ttrl_lightning.errors import UserError
from ttrl_lightning.integrations.scoring import base_model, logit_transform_reason
from ttrl_lightning.modules.fsdp import is_sharded
from ttrl_lightning.ops import linear_logprobs
from ttrl_lightning.ops.checks import FLOAT_DTYPES

log = logging.getLogger("ttrl_lightning.modules")

LOGPROB_IMPLS = ("auto", "fused", "materialized")

def fused_unsupported_reason(model: nn.Module) -> str | None:
    """None when ``model``'s log-probs can be computed from its final hidden states and its head's weight
    (and bias) alone, else why not (one phrase)."""
    reason = logit_transform_reason(model)
    if reason is not None:
        return reason
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        return "it has no LM head (get_output_embeddings() is None)"
    if hasattr(head, "base_layer") or hasattr(head, "lora_A"):
        return f"its LM head carries adapters ({type(head).__name__}, e.g. LoRA on lm_head)"
    if not isinstance(head, nn.Linear) or type(head).forward is not nn.Linear.forward:
        return f"its LM head is a {type(head).__name__}, not a plain torch.nn.Linear"
    if head._forward_hooks or head._forward_pre_hooks:
        return "its LM head has forward hooks"
    if head.weight.dtype not in FLOAT_DTYPES:  # a float64 policy (policy.dtype, --trainer.precision 64-true)
        return (f"its LM head is {str(head.weight.dtype).removeprefix('torch.')} and the fused kernel takes "
                "float32, float16 or bfloat16")
    try:
        base_model(model)
    except AttributeError as e:
        return f"its base model (the module before the head) cannot be reached: {e}"
    if is_sharded(model):
        return ("its parameters are sharded (FSDP2): the head and the root's parameters are gathered only "
                "inside the model's own forward")
    return None


def fused_logprobs(model: nn.Module, targets: torch.Tensor, temperature: float = 1.0, raw: bool = False,
                   **inputs: torch.Tensor):
    """``log p(targets)`` [B, K] float32 from the base model's final hidden states and ``linear_logprobs``;
    ``targets[:, t]`` is predicted by position ``T - K - 1 + t`` of the inputs (``input_ids`` [B, T],
    ``attention_mask``, ``position_ids``, ...). Negative targets give 0 and no gradient. Assumes
    ``fused_unsupported_reason(model) is None``. ``raw``: return ``(log p at temperature, log p at 1 without
    gradient)`` from the same hidden states (one decoder pass)."""
    K = targets.shape[1]
    hidden = base_model(model)(**inputs, use_cache=False)[0]
    head = model.get_output_embeddings()
    h = hidden[:, hidden.shape[1] - K - 1:-1]  # the positions that predict the targets
    out = linear_logprobs(h, head.weight, targets, temperature, head.bias)
    if not raw:
        return out
    with torch.no_grad():
        bias = None if head.bias is None else head.bias.detach()
        return out, linear_logprobs(h.detach(), head.weight.detach(), targets, 1.0, bias)


class LogprobPath:
    """A training module's choice of log-prob path (``impl``: one of ``LOGPROB_IMPLS``).

    ``fused(model)`` says whether to take the fused path for ``model``: True where it is exact (``auto``,
    ``fused``); on a model it does not fit, ``auto`` logs a notice once per reason and says False, and
    ``fused`` raises a ``UserError`` naming the reason.
    """

    def __init__(self, impl: str = "auto", owner: str = "module"):
        if impl not in LOGPROB_IMPLS:
            raise UserError(f"{owner} argument logprob_impl must be one of {', '.join(LOGPROB_IMPLS)}, "
                            f"got {impl!r}")
        self.impl, self.owner = impl, owner
        self.noticed: set[str] = set()

    def fused(self, model: nn.Module) -> bool:
        if self.impl == "materialized":
            return False
        reason = fused_unsupported_reason(model)
        if reason is None:
            return True
        if self.impl == "fused":
            raise UserError(f"{self.owner}: logprob_impl='fused' cannot be used with "
                            f"{type(model).__name__}: {reason}")
        if reason not in self.noticed:
            self.noticed.add(reason)
            log.warning("%s: log-probs from materialised [B, T, V] logits for %s, because %s "
                        "(logprob_impl='auto'; the fused path needs a plain linear LM head)",
                        self.owner, type(model).__name__, reason)
        return False

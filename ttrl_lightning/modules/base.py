"""Shared LightningModule plumbing: the policy model, its tokenizer and the optimizer."""
from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

from ttrl_lightning.models import load_model, load_tokenizer


class PolicyModule(pl.LightningModule):
    """Holds ``self.policy`` (a transformers causal LM, optionally with LoRA) and ``self.tokenizer``.

    model: ``"tiny:<arch>"`` (random tiny model of a real architecture, CPU runs) or a local checkpoint path.
    The model is built in ``configure_model`` so sharded strategies (FSDP) can build it in their context.
    """

    def __init__(
        self,
        model: str = "tiny:qwen2",
        tiny_kwargs: dict[str, Any] | None = None,
        lora: dict[str, Any] | None = None,
        dtype: str | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        seed: int = 0,
    ):
        super().__init__()
        self.tokenizer = load_tokenizer(model)
        self.policy: torch.nn.Module | None = None

    def configure_model(self) -> None:
        if self.policy is not None:
            return
        h = self.hparams
        self.policy = load_model(h.model, self.tokenizer, tiny_kwargs=h.tiny_kwargs, lora=h.lora, dtype=h.dtype,
                                 seed=h.seed)
        self.policy.train()  # from_pretrained returns eval mode; the trainer expects train mode

    def configure_optimizers(self):
        params = [p for p in self.policy.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the policy has no trainable parameters")
        h = self.hparams
        return torch.optim.AdamW(params, lr=h.lr, weight_decay=h.weight_decay, betas=tuple(h.betas))

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Copies of the trainable tensors of the policy (for tests and rank-sync checks)."""
        return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}

"""``EMAAnchor``: a frozen exponential-moving-average copy of the policy used as the KL reference.

Pixelis appendix 6 step 8: pi_EMA <- rho * pi_EMA + (1 - rho) * pi_theta after every optimizer batch,
rho = 0.99. The EMA copy is only ever read as the reference of the KL term (``set_reference_model``); its
weights are never copied into the trained model. Its tensors are saved in the checkpoint (callback state)
and restored on resume. Floating-point tensors are averaged; integer buffers are copied.
"""
from __future__ import annotations

import copy

import lightning.pytorch as pl
import torch


@torch.no_grad()
def ema_update_(ema: torch.nn.Module, model: torch.nn.Module, rho: float) -> None:
    """In place, for every state tensor: e <- rho * e + (1 - rho) * m (floating point) or e <- m."""
    src = model.state_dict()
    for name, e in ema.state_dict().items():
        m = src[name]
        if e.shape != m.shape:
            raise RuntimeError(f"EMA tensor {name} has shape {tuple(e.shape)}, the model {tuple(m.shape)} "
                               "(sharded parameters are not supported by EMAAnchor)")
        if e.is_floating_point():
            e.mul_(rho).add_(m.detach().to(e.dtype), alpha=1 - rho)
        else:
            e.copy_(m)


class EMAAnchor(pl.Callback):
    """Keeps ``ema_model`` (frozen deep copy of ``pl_module.policy``), updates it after each training batch
    and installs it as the module's KL reference (``pl_module.set_reference_model``).

    rho: decay (0.99); update_every: batches between updates (1).
    """

    def __init__(self, rho: float = 0.99, update_every: int = 1):
        if not 0 <= rho < 1:
            raise ValueError(f"rho must be in [0, 1), got {rho}")
        if update_every < 1:
            raise ValueError(f"update_every must be >= 1, got {update_every}")
        self.rho = rho
        self.update_every = update_every
        self.ema_model: torch.nn.Module | None = None
        self.num_updates = 0
        self._pending: dict | None = None

    def _build(self, pl_module) -> None:
        if self.ema_model is None:
            self.ema_model = copy.deepcopy(pl_module.policy).eval().requires_grad_(False)
            if self._pending is not None:
                self.ema_model.load_state_dict(self._pending)
                self._pending = None
        self.ema_model.to(pl_module.device)

    def on_fit_start(self, trainer, pl_module) -> None:
        if not hasattr(pl_module, "set_reference_model"):
            raise TypeError("EMAAnchor needs a module with `policy` and `set_reference_model` (e.g. GRPOModule)")
        if type(trainer.strategy).__name__.startswith(("FSDP", "DeepSpeed")):
            raise NotImplementedError("EMAAnchor keeps a full copy of the policy; sharded strategies (FSDP, "
                                      "DeepSpeed) are not supported yet: use DDP, or reference='initial'")
        self._build(pl_module)
        pl_module.set_reference_model(self.ema_model)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if (batch_idx + 1) % self.update_every == 0:
            ema_update_(self.ema_model, pl_module.policy, self.rho)
            self.num_updates += 1

    def state_dict(self) -> dict:
        if self.ema_model is not None:
            ema = {k: v.detach().cpu().clone() for k, v in self.ema_model.state_dict().items()}
        else:
            ema = self._pending
        return {"rho": self.rho, "num_updates": self.num_updates, "ema_state": ema}

    def load_state_dict(self, state_dict: dict) -> None:
        self.num_updates = int(state_dict.get("num_updates", 0))
        ema = state_dict.get("ema_state")
        if ema is None:
            return
        if self.ema_model is not None:
            self.ema_model.load_state_dict(ema)
        else:
            self._pending = ema

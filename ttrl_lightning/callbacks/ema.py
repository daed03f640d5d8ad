"""``EMAAnchor``: a frozen exponential-moving-average copy of the policy used as the KL reference.

Pixelis appendix 6 step 8: pi_EMA <- rho * pi_EMA + (1 - rho) * pi_theta after every optimizer batch,
rho = 0.99. The EMA copy is only ever read as the reference of the KL term (``set_reference_model``); its
weights are never copied into the trained model. Floating-point tensors are averaged; integer buffers are
copied.

Strategies: single device and DDP keep a full copy on every rank. Under FSDP2 (Lightning's
``ModelParallelStrategy``, ``configs/scale/fsdp.yaml``) the copy is sharded exactly like the policy
(``modules.sharding.frozen_copy``): the update is elementwise, so each rank averages only its own shard
(``e_r <- rho e_r + (1 - rho) m_r`` on the local tensors, no communication), and the reference forward
all-gathers like the policy's. Lightning's FSDP1 ``FSDPStrategy`` (flat parameters) is refused.

Checkpoints: the callback state holds the full EMA tensors (single device, DDP, or FSDP2 writing one full
file); with FSDP2's distributed checkpoint folder each rank's EMA shards are written with the policy's
shards (``state_dict`` keys under ``frozen_copies.ema_anchor.``) and read back into the same shards on resume.
"""
from __future__ import annotations

import lightning.pytorch as pl
import torch

from ttrl_lightning.errors import UserError

from ttrl_lightning.modules.fsdp import (
    checkpoint_entry,
    frozen_copy,
    is_sharded,
    load_full_state_dict_,
    local_tensor,
    restore_checkpoint_entry,
)

#: key prefix of the EMA shards in a distributed checkpoint's ``state_dict``
EMA_STATE_KEY = "ema_anchor"


@torch.no_grad()
def ema_update_(ema: torch.nn.Module, model: torch.nn.Module, rho: float) -> None:
    """In place, once for every state tensor (tied ones once): e <- rho * e + (1 - rho) * m (floating point)
    or e <- m.

    Sharded (DTensor) tensors are updated on this rank's shard; ``ema`` and ``model`` must then be sharded
    alike (``frozen_copy``)."""
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():  # a root FSDP unit may keep its gathered weights after a no-grad forward
        if isinstance(m, FSDPModule):
            m.reshard()
    src = model.state_dict(keep_vars=True)
    seen: set[int] = set()
    for name, e in ema.state_dict(keep_vars=True).items():
        if id(e) in seen:  # a tied tensor (embeddings shared with the LM head) is averaged once
            continue
        seen.add(id(e))
        m = src[name]
        if getattr(e, "placements", None) != getattr(m, "placements", None):
            raise RuntimeError(f"EMA tensor {name} is sharded as {getattr(e, 'placements', 'a full tensor')},"
                               f" the model's as {getattr(m, 'placements', 'a full tensor')}")
        e, m = local_tensor(e), local_tensor(m)
        if e.shape != m.shape:
            raise RuntimeError(f"EMA tensor {name} has shape {tuple(e.shape)}, the model {tuple(m.shape)}")
        if e.is_floating_point():
            e.mul_(rho).add_(m.detach().to(e.dtype), alpha=1 - rho)
        else:
            e.copy_(m)


class EMAAnchor(pl.Callback):
    """Keeps ``ema_model`` (frozen copy of ``pl_module.policy``, sharded like it under FSDP2), updates it
    after each training batch and installs it as the module's KL reference
    (``pl_module.set_reference_model``).

    rho: decay (0.99); update_every: batches between updates (1).
    """

    def __init__(self, rho: float = 0.99, update_every: int = 1):
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0 <= rho < 1:
            raise UserError(f"EMAAnchor: rho must be in [0, 1), got {rho!r}")
        if isinstance(update_every, bool) or not isinstance(update_every, int) or update_every < 1:
            raise UserError(f"EMAAnchor: update_every must be an integer >= 1, got {update_every!r}")
        self.rho = rho
        self.update_every = update_every
        self.ema_model: torch.nn.Module | None = None
        self.num_updates = 0
        self._pending: dict | None = None

    def _build(self, pl_module) -> None:
        if self.ema_model is None:
            self.ema_model = frozen_copy(pl_module.policy)
            if self._pending is not None:
                load_full_state_dict_(self.ema_model, self._pending)
                self._pending = None
        if not is_sharded(self.ema_model):
            self.ema_model.to(pl_module.device)

    def on_fit_start(self, trainer, pl_module) -> None:
        if not hasattr(pl_module, "set_reference_model"):
            raise TypeError("EMAAnchor needs a module with `policy` and `set_reference_model` "
                            "(e.g. GRPOModule)")
        if type(trainer.strategy).__name__.startswith(("FSDP", "DeepSpeed")):
            raise NotImplementedError(
                f"EMAAnchor does not support {type(trainer.strategy).__name__} (flat or partitioned "
                "parameters): for FSDP use Lightning's ModelParallelStrategy (FSDP2, "
                "configs/scale/fsdp.yaml) or DDP")
        self._build(pl_module)
        pl_module.set_reference_model(self.ema_model)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if (batch_idx + 1) % self.update_every == 0:
            ema_update_(self.ema_model, pl_module.policy, self.rho)
            self.num_updates += 1

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        state = {"rho": self.rho, "num_updates": self.num_updates, "ema_state": self._pending}
        if self.ema_model is not None and not is_sharded(self.ema_model):
            state["ema_state"] = {k: v.detach().cpu().clone() for k, v in self.ema_model.state_dict().items()}
        return state

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """A sharded EMA: its shards join the distributed checkpoint, or its full tensors this callback's
        state (every rank runs this, in the same order)."""
        if self.ema_model is not None and is_sharded(self.ema_model):
            entry = checkpoint_entry(self.ema_model, checkpoint, EMA_STATE_KEY)
            checkpoint["callbacks"][self.state_key]["sharded_ema"] = entry

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        entry = checkpoint.get("callbacks", {}).get(self.state_key, {}).get("sharded_ema")
        if entry is None:
            return
        if self.ema_model is None:
            if "full_state" not in entry:
                raise RuntimeError("a distributed checkpoint's EMA shards can only be restored into a "
                                   "sharded EMA copy (FSDP2, ModelParallelStrategy)")
            self._pending = entry["full_state"]
            return
        restore_checkpoint_entry(self.ema_model, entry, trainer.ckpt_path)

    def load_state_dict(self, state_dict: dict) -> None:
        self.num_updates = int(state_dict.get("num_updates", 0))
        ema = state_dict.get("ema_state")
        if ema is None:
            return
        if self.ema_model is not None:
            load_full_state_dict_(self.ema_model, ema)
        else:
            self._pending = ema

"""``RankStateDump``: at the end of fit, each rank writes its policy weights, EMA state and beta to
``<dirpath>/rank<r>.pt`` so runs can be compared (DDP ranks in sync, resume == uninterrupted)."""
from __future__ import annotations

import os

import lightning.pytorch as pl
import torch


class RankStateDump(pl.Callback):
    def __init__(self, dirpath: str):
        self.dirpath = dirpath

    def on_fit_end(self, trainer, pl_module) -> None:
        os.makedirs(self.dirpath, exist_ok=True)
        state = {"policy": {k: v.detach().cpu() for k, v in pl_module.policy.state_dict().items()},
                 "kl_coef": getattr(pl_module, "kl_coef", None), "global_step": trainer.global_step}
        for cb in trainer.callbacks:
            if hasattr(cb, "ema_model") and cb.ema_model is not None:
                state["ema"] = {k: v.detach().cpu() for k, v in cb.ema_model.state_dict().items()}
            if hasattr(cb, "controller") and cb.controller is not None:
                state["pid"] = cb.controller.state_dict()
                state["pid_kl"] = {"local": cb.last_local_kl, "reduced": cb.last_reduced_kl}
        torch.save(state, os.path.join(self.dirpath, f"rank{trainer.global_rank}.pt"))

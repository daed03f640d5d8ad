"""Training callbacks: the EMA anchor (KL reference), the PID controller of the KL coefficient and the
label-free stopping rule."""
from ttrl_lightning.callbacks.ema import EMAAnchor, ema_update_
from ttrl_lightning.callbacks.pid import PIDController, PIDKLController
from ttrl_lightning.callbacks.state_dump import RankStateDump
from ttrl_lightning.callbacks.stopping import LabelFreeStopping, StoppingRule, stop_decision

__all__ = ["EMAAnchor", "ema_update_", "PIDController", "PIDKLController", "RankStateDump", "LabelFreeStopping",
           "StoppingRule", "stop_decision"]

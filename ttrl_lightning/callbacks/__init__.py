"""Training callbacks: the EMA anchor (KL reference) and the PID controller of the KL coefficient."""
from ttrl_lightning.callbacks.ema import EMAAnchor, ema_update_
from ttrl_lightning.callbacks.pid import PIDController, PIDKLController
from ttrl_lightning.callbacks.state_dump import RankStateDump

__all__ = ["EMAAnchor", "ema_update_", "PIDController", "PIDKLController", "RankStateDump"]

"""PID control of the KL coefficient beta (Pixelis appendix 6.1), as a plain object and a Lightning callback.

Discrete rule (positional form, linear beta space, one step per optimizer batch, dt = 1). With target
KL_tgt and the observed mean token KL k_t at step t:

    s_t = k_0                         (t = 0)         smoothed KL, EMA with tau = 0.9:
    s_t = tau * s_{t-1} + (1 - tau) * k_t  (t > 0)
    e_t = s_t - KL_tgt                                 error; beta grows when KL is above target
    I_t = clamp(I_{t-1} + e_t, -I_max, I_max)          integral with clamp I_max = 5 (anti-windup), I_{-1} = 0
    D_t = e_t - e_{t-1}   (0 at t = 0)                 derivative on the smoothed error
    Kd_t = 0 for t < warmup (100), else Kd            no derivative kick during warm-up
    beta_t = clamp(beta_0 + Kp e_t + Ki I_t + Kd_t D_t, beta_min, beta_max)

Defaults are the paper's: KL_tgt 0.15, corridor [0.10, 0.20] (for reporting ``in_corridor``), Kp 0.30,
Ki 0.05, Kd 0.10, beta in [1e-3, 1e2], I_max 5, warm-up 100, tau 0.9. ``beta_0`` (the operating point,
the module's initial ``kl_coef``) is not given by the paper. Note on authority: in positional form the
steady state (e = 0) is beta_0 + Ki * I with |I| <= I_max, i.e. beta_0 +- 0.25 with these gains, so
beta_0 must be set near the beta that holds KL at target for the model at hand.
Timing: the update runs after each training batch, so the loss of batch t uses beta_{t-1} (beta_0 first).
Under DDP the callback all-reduces k_t (mean over ranks) first, so every rank computes the same beta.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import lightning.pytorch as pl
import torch


@dataclass
class PIDState:
    step: int = 0
    kl_smoothed: float | None = None
    integral: float = 0.0
    prev_error: float | None = None
    beta: float | None = None
    p_term: float = 0.0
    i_term: float = 0.0
    d_term: float = 0.0


class PIDController:
    """The rule of the module docstring; ``update(kl) -> beta``; ``state_dict``/``load_state_dict``."""

    def __init__(self, beta_0: float = 0.1, target: float = 0.15, corridor: tuple[float, float] = (0.10, 0.20),
                 kp: float = 0.30, ki: float = 0.05, kd: float = 0.10, beta_min: float = 1e-3,
                 beta_max: float = 1e2, integral_max: float = 5.0, warmup_steps: int = 100,
                 smoothing: float = 0.9):
        if not beta_min <= beta_0 <= beta_max:
            raise ValueError(f"beta_0={beta_0} outside [{beta_min}, {beta_max}]")
        if not corridor[0] <= target <= corridor[1]:
            raise ValueError(f"target {target} outside the corridor {corridor}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.beta_0, self.target, self.corridor = beta_0, target, tuple(corridor)
        self.kp, self.ki, self.kd = kp, ki, kd
        self.beta_min, self.beta_max, self.integral_max = beta_min, beta_max, integral_max
        self.warmup_steps, self.smoothing = warmup_steps, smoothing
        self.state = PIDState(beta=beta_0)

    @property
    def beta(self) -> float:
        return float(self.state.beta)

    def update(self, kl: float) -> float:
        kl = float(kl)
        if not math.isfinite(kl):
            raise ValueError(f"PID controller got a non-finite KL observation: {kl}")
        s = self.state
        s.kl_smoothed = kl if s.kl_smoothed is None else self.smoothing * s.kl_smoothed + (1 - self.smoothing) * kl
        e = s.kl_smoothed - self.target
        s.integral = min(max(s.integral + e, -self.integral_max), self.integral_max)
        d = 0.0 if s.prev_error is None else e - s.prev_error
        kd = 0.0 if s.step < self.warmup_steps else self.kd
        s.p_term, s.i_term, s.d_term = self.kp * e, self.ki * s.integral, kd * d
        s.beta = min(max(self.beta_0 + s.p_term + s.i_term + s.d_term, self.beta_min), self.beta_max)
        s.prev_error = e
        s.step += 1
        return s.beta

    def in_corridor(self) -> bool:
        return self.state.kl_smoothed is not None and self.corridor[0] <= self.state.kl_smoothed <= self.corridor[1]

    def state_dict(self) -> dict:
        return asdict(self.state)

    def load_state_dict(self, state: dict) -> None:
        self.state = PIDState(**state)


class PIDKLController(pl.Callback):
    """Drives ``pl_module.kl_coef`` with a ``PIDController`` from ``pl_module.kl_observation`` (the mean
    token KL of the last training batch); logs ``pid/beta``, ``pid/p``, ``pid/i``, ``pid/d``,
    ``pid/kl_smoothed``, ``pid/in_corridor``. Its state is saved in checkpoints. ``beta_0=None`` takes the
    module's initial ``kl_coef``."""

    def __init__(self, beta_0: float | None = None, target: float = 0.15,
                 corridor: tuple[float, float] = (0.10, 0.20), kp: float = 0.30, ki: float = 0.05,
                 kd: float = 0.10, beta_min: float = 1e-3, beta_max: float = 1e2, integral_max: float = 5.0,
                 warmup_steps: int = 100, smoothing: float = 0.9):
        self.kwargs = dict(target=target, corridor=tuple(corridor), kp=kp, ki=ki, kd=kd, beta_min=beta_min,
                           beta_max=beta_max, integral_max=integral_max, warmup_steps=warmup_steps,
                           smoothing=smoothing)
        self.beta_0 = beta_0
        self.controller: PIDController | None = None
        self.last_local_kl: float | None = None
        self.last_reduced_kl: float | None = None
        self._pending: dict | None = None

    def _ensure(self, pl_module) -> PIDController:
        if self.controller is None:
            beta_0 = self.beta_0 if self.beta_0 is not None else float(pl_module.kl_coef)
            self.controller = PIDController(beta_0=beta_0, **self.kwargs)
            if self._pending is not None:
                self.controller.load_state_dict(self._pending)
                self._pending = None
        return self.controller

    def on_fit_start(self, trainer, pl_module) -> None:
        if not hasattr(pl_module, "kl_coef") or not hasattr(pl_module, "kl_observation"):
            raise TypeError("PIDKLController needs a module with `kl_coef` and `kl_observation` (e.g. GRPOModule)")
        pl_module.kl_coef = self._ensure(pl_module).beta

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        kl = pl_module.kl_observation
        if kl is None:
            raise RuntimeError("the module did not set `kl_observation` in training_step")
        kl = torch.as_tensor(kl, dtype=torch.float32, device=pl_module.device).detach().clone()
        self.last_local_kl = float(kl)
        kl = trainer.strategy.reduce(kl, reduce_op="mean")  # same beta on every rank
        self.last_reduced_kl = float(kl)
        ctl = self._ensure(pl_module)
        pl_module.kl_coef = ctl.update(float(kl))
        s = ctl.state
        pl_module.log_dict({"pid/beta": s.beta, "pid/p": s.p_term, "pid/i": s.i_term, "pid/d": s.d_term,
                            "pid/kl_smoothed": s.kl_smoothed, "pid/in_corridor": float(ctl.in_corridor())},
                           on_step=True, on_epoch=False)

    def state_dict(self) -> dict:
        if self.controller is not None:
            return {"controller": self.controller.state_dict(), "beta_0": self.controller.beta_0}
        return {"controller": self._pending} if self._pending is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        st = state_dict.get("controller")
        if st is None:
            return
        if "beta_0" in state_dict and self.beta_0 is None:
            self.beta_0 = state_dict["beta_0"]
        if self.controller is not None:
            self.controller.load_state_dict(st)
        else:
            self._pending = st

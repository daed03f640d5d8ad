"""PID control of the KL coefficient beta (Pixelis appendix 6.1), as a plain object and a Lightning callback.

Every form observes the mean token KL k_t of optimizer batch t over the tokens that carry loss (the kept
groups' kept rows: an abstained question or a dropped row is no part of the update and no part of k_t; a batch
that trains no token is no observation, and beta is held; one update per batch, dt = 1) and shares the
smoothing and the warm-up; they differ in the update rule (``PID_FORMS``, chosen by ``form``):

    s_t  = k_0 (t = 0);  s_t = tau * s_{t-1} + (1 - tau) * k_t (t > 0)     smoothed KL, EMA with tau = 0.9
    Kd_t = 0 for t < warmup (100), else Kd                                 no derivative kick in warm-up

``positional`` (linear beta, absolute error; the landed rule, kept as an option):
    e_t = s_t - KL_tgt;  I_t = clamp(I_{t-1} + e_t, -I_max, I_max), I_{-1} = 0
    D_t = e_t - e_{t-1} (D_0 = 0)
    beta_t = clamp(beta_0 + Kp e_t + Ki I_t + Kd_t D_t, beta_min, beta_max)

``incremental`` (velocity form, linear beta, absolute error e_t = s_t - KL_tgt):
    D_t = e_t - e_{t-1} (D_0 = 0, e_{-1} = 0 for the P increment)
    beta_t = clamp(beta_{t-1} + Kp (e_t - e_{t-1}) + Ki_t e_t + Kd_t (D_t - D_{t-1}), beta_min, beta_max)
    beta_{-1} = beta_0, D_{-1} = 0

``log`` (velocity form in u = log beta, relative error as in adaptive-KL practice; the default):
    e_t = s_t / KL_tgt - 1 (optionally clipped to ``error_clip``)
    u_t = clamp(u_{t-1} + Kp (e_t - e_{t-1}) + Ki_t e_t + Kd_t (D_t - D_{t-1}), log beta_min, log beta_max)
    beta_t = exp(u_t), u_{-1} = log beta_0, e_{-1} = 0, D as above

    In both velocity forms the state (beta or u) is the integral, so the clamp of the state is the anti-windup
    and ``integral_max`` is not used. ``Ki_t`` is the start-up rule ``integral_start``: ``"immediate"``
    (Ki_t = Ki), ``"warmup"`` (Ki_t = 0 for t < warmup: the warm-up that already holds Kd at 0 also holds
    the integral, so the rise from KL = 0 does not wind it up; bumpless, since a velocity form keeps no
    integral to reset), ``"corridor"`` (Ki_t = 0 until s_t first reaches the corridor's lower edge or
    t >= warmup, whichever comes first). The P and I terms logged are the step's increments.
    Departure from appendix 6.1: the paper holds only Kd at 0 in warm-up; ``integral_start="immediate"`` is
    its rule. The default ``"warmup"`` also holds Ki, because from KL = 0 the relative error is -1 for the
    whole rise and the integral would drive beta to beta_min before KL arrives (``benchmarks/training/kl_control.py``
    compares the rules). A run shorter than its warm-up is then proportional-only: the callback warns when
    ``trainer.max_steps`` does not pass ``warmup_steps``; size ``warmup_steps`` to the run.

``ziegler`` (Ziegler et al. 2019, the adaptive controller of TRL, verl and OpenRLHF; gains unused):
    e_t = clip(k_t / KL_tgt - 1, -0.2, 0.2)     on the raw KL, as they ship it
    beta_t = clamp(beta_{t-1} * (1 + e_t * n_steps / horizon), beta_min, beta_max), n_steps = 1, horizon 10,000

``fixed``:  beta_t = beta_0.

Defaults are the paper's: KL_tgt 0.15, corridor [0.10, 0.20] (for reporting ``in_corridor``), Kp 0.30,
Ki 0.05, Kd 0.10, beta in [1e-3, 1e2], I_max 5, warm-up 100, tau 0.9. ``beta_0`` (the operating point,
the module's initial ``kl_coef``) is not given by the paper. Authority: in positional form the steady
state (e = 0) is beta_0 + Ki * I with |I| <= I_max, i.e. beta_0 +- 0.25 with these gains, so beta_0 must be
set near the beta that holds KL at target; the velocity forms reach the whole [beta_min, beta_max].
Measured step responses of every form: ``benchmarks/training/kl_control.py`` and docs/training.md.
Timing: the update runs after each training batch, so the loss of batch t uses beta_{t-1} (beta_0 first).
Under DDP the callback all-reduces k_t (mean over the ranks that trained a token) first, so every rank
computes the same beta.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn
import torch

from ttrl_lightning.errors import UserError
from ttrl_lightning.registry import Registry

INTEGRAL_STARTS = ("immediate", "warmup", "corridor")


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
    prev_difference: float = 0.0  # D_{t-1} of the velocity forms
    integral_engaged: bool = False  # velocity forms: the start-up rule has switched the integral on
    form: str = "positional"


UpdateRule = Callable[["PIDController", PIDState, float], float]
PID_FORMS: Registry[UpdateRule] = Registry("PID form")


@PID_FORMS.register("positional")
def positional_update(c: PIDController, s: PIDState, kl: float) -> float:
    e = s.kl_smoothed - c.target
    s.integral = min(max(s.integral + e, -c.integral_max), c.integral_max)
    d = 0.0 if s.prev_error is None else e - s.prev_error
    kd = 0.0 if s.step < c.warmup_steps else c.kd
    s.p_term, s.i_term, s.d_term = c.kp * e, c.ki * s.integral, kd * d
    s.prev_error = e
    return min(max(c.beta_0 + s.p_term + s.i_term + s.d_term, c.beta_min), c.beta_max)


def _velocity_increment(c: PIDController, s: PIDState, e: float) -> float:
    """Kp (e_t - e_{t-1}) + Ki_t e_t + Kd_t (D_t - D_{t-1}); updates the error history and the logged terms."""
    if not s.integral_engaged:
        s.integral_engaged = (c.integral_start == "immediate" or s.step >= c.warmup_steps
                              or (c.integral_start == "corridor" and s.kl_smoothed >= c.corridor[0]))
    d = 0.0 if s.prev_error is None else e - s.prev_error
    kd = 0.0 if s.step < c.warmup_steps else c.kd
    ki = c.ki if s.integral_engaged else 0.0
    s.p_term = c.kp * (e - (s.prev_error or 0.0))
    s.i_term, s.d_term = ki * e, kd * (d - s.prev_difference)
    s.prev_error, s.prev_difference = e, d
    return s.p_term + s.i_term + s.d_term


@PID_FORMS.register("incremental")
def incremental_update(c: PIDController, s: PIDState, kl: float) -> float:
    e = c.clip_error(s.kl_smoothed - c.target)
    return min(max(s.beta + _velocity_increment(c, s, e), c.beta_min), c.beta_max)


@PID_FORMS.register("log")
def log_update(c: PIDController, s: PIDState, kl: float) -> float:
    e = c.clip_error(s.kl_smoothed / c.target - 1.0)
    u = math.log(s.beta) + _velocity_increment(c, s, e)
    return math.exp(min(max(u, math.log(c.beta_min)), math.log(c.beta_max)))


@PID_FORMS.register("ziegler")
def ziegler_update(c: PIDController, s: PIDState, kl: float) -> float:
    e = min(max(kl / c.target - 1.0, -0.2), 0.2)
    s.p_term, s.i_term, s.d_term = e, 0.0, 0.0
    return min(max(s.beta * (1.0 + e * 1 / c.horizon), c.beta_min), c.beta_max)


@PID_FORMS.register("fixed")
def fixed_update(c: PIDController, s: PIDState, kl: float) -> float:
    return c.beta_0


class PIDController:
    """The rules of the module docstring; ``update(kl) -> beta``; ``state_dict``/``load_state_dict``."""

    def __init__(self, beta_0: float = 0.1, target: float = 0.15, corridor: tuple[float, float] = (0.10, 0.20),
                 kp: float = 0.30, ki: float = 0.05, kd: float = 0.10, beta_min: float = 1e-3,
                 beta_max: float = 1e2, integral_max: float = 5.0, warmup_steps: int = 100,
                 smoothing: float = 0.9, form: str = "log", integral_start: str = "warmup",
                 error_clip: tuple[float, float] | None = None, horizon: float = 10_000.0):
        numbers = dict(beta_0=beta_0, target=target, kp=kp, ki=ki, kd=kd, beta_min=beta_min, beta_max=beta_max,
                       integral_max=integral_max, smoothing=smoothing, horizon=horizon)
        for name, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UserError(f"PIDKLController: {name} must be a finite number, got {value!r}")
        if (not isinstance(corridor, (list, tuple)) or len(corridor) != 2
                or any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) for c in corridor)
                or not 0 <= corridor[0] < corridor[1]):
            raise UserError(f"PIDKLController: corridor must be two finite numbers [low, high] with 0 <= low < high, "
                            f"got {corridor!r}")
        if not 0 <= beta_min <= beta_max:
            raise UserError(f"PIDKLController: need 0 <= beta_min <= beta_max, got {beta_min}, {beta_max}")
        if not beta_min <= beta_0 <= beta_max:
            raise UserError(f"PIDKLController: beta_0={beta_0} outside [{beta_min}, {beta_max}]")
        if not corridor[0] <= target <= corridor[1] or target <= 0:
            raise UserError(f"PIDKLController: target {target} must be > 0 and inside the corridor {list(corridor)}")
        if not 0 <= smoothing < 1:
            raise UserError(f"PIDKLController: smoothing must be in [0, 1), got {smoothing}")
        if integral_max < 0 or horizon <= 0:
            raise UserError(f"PIDKLController: need integral_max >= 0 and horizon > 0, got {integral_max}, {horizon}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise UserError(f"PIDKLController: warmup_steps must be an integer >= 0, got {warmup_steps!r}")
        if integral_start not in INTEGRAL_STARTS:
            raise UserError(f"PIDKLController: integral_start must be one of {INTEGRAL_STARTS}, got {integral_start!r}")
        if form == "log" and beta_min <= 0:
            raise UserError("PIDKLController: the log form needs beta_min > 0")
        if form not in PID_FORMS:
            raise UserError(f"PIDKLController: form must be one of {', '.join(PID_FORMS.names())}, got {form!r}")
        self.rule = PID_FORMS[form]
        self.form = form
        self.beta_0, self.target, self.corridor = beta_0, target, tuple(corridor)
        self.kp, self.ki, self.kd = kp, ki, kd
        self.beta_min, self.beta_max, self.integral_max = beta_min, beta_max, integral_max
        self.warmup_steps, self.smoothing = warmup_steps, smoothing
        self.integral_start, self.horizon = integral_start, horizon
        self.error_clip = None if error_clip is None else (float(error_clip[0]), float(error_clip[1]))
        self.state = PIDState(beta=beta_0, form=form)

    @property
    def beta(self) -> float:
        return float(self.state.beta)

    def clip_error(self, e: float) -> float:
        return e if self.error_clip is None else min(max(e, self.error_clip[0]), self.error_clip[1])

    def update(self, kl: float) -> float:
        kl = float(kl)
        if not math.isfinite(kl):
            raise ValueError(f"PID controller got a non-finite KL observation: {kl}")
        s = self.state
        s.kl_smoothed = kl if s.kl_smoothed is None else self.smoothing * s.kl_smoothed + (1 - self.smoothing) * kl
        s.beta = self.rule(self, s, kl)
        s.step += 1
        return s.beta

    def in_corridor(self) -> bool:
        return self.state.kl_smoothed is not None and self.corridor[0] <= self.state.kl_smoothed <= self.corridor[1]

    def state_dict(self) -> dict:
        return asdict(self.state)

    def load_state_dict(self, state: dict) -> None:
        state = {"form": "positional", **state}  # checkpoints written before the forms existed
        if state["form"] != self.form:
            raise UserError(f"checkpoint holds the state of the {state['form']!r} PID form, "
                             f"this controller is {self.form!r}")
        self.state = PIDState(**state)


class PIDKLController(pl.Callback):
    """Drives ``pl_module.kl_coef`` with a ``PIDController`` from ``pl_module.kl_observation`` (the mean
    token KL of the last training batch over the tokens that carry loss: ``GRPOModule.observed_kl``). A step
    whose ``pl_module.kl_observation_tokens`` is 0 on every rank (every group abstained) is no observation:
    beta and the controller's state are held. Under DDP the observation is the mean over the ranks that
    trained a token. Logs ``pid/beta``, ``pid/p``, ``pid/i``, ``pid/d``,
    ``pid/kl_smoothed``, ``pid/in_corridor``. Its state is saved in checkpoints. ``beta_0=None`` takes the
    module's initial ``kl_coef``. ``form`` picks the update rule (``PID_FORMS``: positional, incremental,
    log, ziegler, fixed); ``integral_start``, ``error_clip`` and ``horizon`` are read by the forms that use
    them (module docstring)."""

    def __init__(self, beta_0: float | None = None, target: float = 0.15,
                 corridor: tuple[float, float] = (0.10, 0.20), kp: float = 0.30, ki: float = 0.05,
                 kd: float = 0.10, beta_min: float = 1e-3, beta_max: float = 1e2, integral_max: float = 5.0,
                 warmup_steps: int = 100, smoothing: float = 0.9, form: str = "log",
                 integral_start: str = "warmup", error_clip: tuple[float, float] | None = None,
                 horizon: float = 10_000.0):
        # every argument checked now, as the module's are (one line at parse time), not at the first step
        probe = min(max(0.1, beta_min), beta_max) if isinstance(beta_min, (int, float)) and \
            isinstance(beta_max, (int, float)) else 0.1
        PIDController(beta_0=probe if beta_0 is None else beta_0, target=target, corridor=corridor, kp=kp, ki=ki,
                      kd=kd, beta_min=beta_min, beta_max=beta_max, integral_max=integral_max,
                      warmup_steps=warmup_steps, smoothing=smoothing, form=form, integral_start=integral_start,
                      error_clip=error_clip, horizon=horizon)
        self.kwargs = dict(target=target, corridor=tuple(corridor), kp=kp, ki=ki, kd=kd, beta_min=beta_min,
                           beta_max=beta_max, integral_max=integral_max, warmup_steps=warmup_steps,
                           smoothing=smoothing, form=form, integral_start=integral_start,
                           error_clip=error_clip, horizon=horizon)
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
            raise UserError(f"PIDKLController needs a module with `kl_coef` and `kl_observation` (GRPOModule and its "
                            f"subclasses), got {type(pl_module).__name__}")
        pl_module.kl_coef = self._ensure(pl_module).beta
        steps, warmup = trainer.max_steps, self.kwargs["warmup_steps"]
        if self.kwargs["form"] not in ("ziegler", "fixed") and 0 < steps <= warmup:
            held = ("Kd is held at 0" if self.kwargs["form"] == "positional"
                    else "Kd, and Ki under integral_start='warmup', are held at 0")
            rank_zero_warn(f"PIDKLController: the run's {steps} steps end inside the {warmup}-step warm-up, so "
                           f"the controller never runs whole ({held}); set warmup_steps below max_steps to use "
                           "the whole controller")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        kl = pl_module.kl_observation
        if kl is None:
            raise RuntimeError("the module did not set `kl_observation` in training_step")
        kl = torch.as_tensor(kl, dtype=torch.float32, device=pl_module.device).detach().clone()
        tokens = getattr(pl_module, "kl_observation_tokens", None)  # None: a module that does not count them
        observed = torch.ones((), device=kl.device) if tokens is None else (
            torch.as_tensor(tokens, device=kl.device) > 0).float()
        self.last_local_kl = float(kl) if observed else None
        # the mean over the ranks that observed a KL (trained a token); same beta on every rank
        both = trainer.strategy.reduce(torch.stack([kl * observed, observed]), reduce_op="mean")
        ctl = self._ensure(pl_module)
        if float(both[1]) == 0:  # no rank trained a token (every group abstained): no observation, beta held
            self.last_reduced_kl = None
            pl_module.kl_coef = ctl.beta
            pl_module.log_dict({"pid/beta": ctl.beta}, on_step=True, on_epoch=False)
            return
        kl = both[0] / both[1]
        self.last_reduced_kl = float(kl)
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

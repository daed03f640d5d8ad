"""``LabelFreeStopping``: when to stop test-time RL without a label -- a rule on label-free training signals.

Label-free RL rises and then falls: its gains peak and, trained on, fall below the start as entropy and length
collapse ("No Free Lunch"), and TTRL's users ask when to stop (PRIME-RL/TTRL #48). No public recipe has a
label-free answer. This rule reads only what every TTRL step logs without gold:

* **consensus plateau.** ``train/majority_ratio`` (the winning answer's share of a question's votes, mean over
  the batch) rises while the policy converges on its pseudo-labels. Smoothed by an EMA
  (``s_t = a s_{t-1} + (1 - a) x_t``, ``a = smoothing``), the rule fires at the first step ``t >= min_steps``
  whose last ``patience`` smoothed values set no new high by more than ``min_delta`` over the best before
  them: the labels have stopped moving, and further steps only sharpen the policy on them. A plateau is one
  only after a rise (``min_rise``; None: the rule before it existed). The start level is the mean of the first
  ``patience`` raw values, the best before the window is taken from step ``patience`` on (the EMA's first
  values lean on the first step's value alone), and it must reach the start level + ``min_rise``. Without the
  rise, a ratio that never moves (a small learning rate, where the policy changes slowly) fires the rule on its
  noise: on the curriculum runs (4 questions a step, lr 1e-6), the EMA's start on one high first value
  made every run, gold included, "plateau" at step 8. ``min_rise`` 0.1 was set after seeing those four runs'
  curves (``configs/study/smollm2_curriculum.yaml``, ``ttrl study``): in-sample there, validated only on the runs after it.
* **length collapse.** ``train/completion_len`` smoothed the same way falls below ``length_floor`` times its
  first value, at a step ``t >= min_steps``: the collapse that precedes the fall.
* **lock-in** (TTRL-Guard's warning; ``lock_ratio`` None turns it off). ``train/flip_rate`` (the share of the
  batch's questions seen before whose majority answer changed since; logged once questions come round again)
  and the majority ratio, each smoothed the same way over the steps that logged it: at a step ``t >= min_steps``
  with a flip rate, smoothed flip rate <= ``lock_flip_rate`` while the smoothed majority ratio >= ``lock_ratio``:
  the labels no longer move and the votes have become one answer, whether or not the length fell (the
  collapse the length rule misses).

Steps are counted from 0: ``t`` is the index of the training batch whose logged values fired the rule, so
``min_steps`` steps (0 to ``min_steps - 1``) always run before the rule may fire, under either signal (and,
for the plateau, at least ``patience`` steps before the window, ``t >= patience``).

``stop_decision(history, rule)`` is the pure function (``history``: the per-step values in step order); the
callback feeds it each step's values (averaged over ranks, so every rank decides alike), logs
``stop/majority_ratio_smoothed`` and, once, ``stop/flagged_step``; ``mode="stop"`` ends the run there,
``mode="flag"`` only records it (``flagged``), to validate the rule against a gold curve on full runs.
The step logged (``stop/flagged_step``, ``flagged["step"]``) is that 0-based index of the training batch
across epochs (``trainer.fit_loop.total_batch_idx``), the ``step`` under which the batch's ``train/*`` values
are logged (the CSV log's ``step`` column; the README's step index), not ``trainer.global_step`` (the count
of optimizer steps: one more after the batch, and ``num_iterations`` per batch). ``mode="stop"`` ends the
run after that step: ``trainer.global_step`` is then its optimizer-step count.

The rule was validated on one task and one model (the SmolLM2 curriculum study, ``configs/study/smollm2_curriculum.yaml``: SmolLM2-135M-Instruct on
reasoning-gym ``chain_sum``; the README reports the step it picks against the best held-out step). It is a
heuristic, not a guarantee.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import lightning.pytorch as pl
import torch

from ttrl_lightning.errors import UserError

__all__ = ["StoppingRule", "stop_decision", "smoothed", "LabelFreeStopping"]

#: the logged metrics the rule reads
MAJORITY_RATIO, COMPLETION_LEN, FLIP_RATE = "train/majority_ratio", "train/completion_len", "train/flip_rate"


@dataclass(frozen=True)
class StoppingRule:
    """The rule's settings (module docstring)."""

    smoothing: float = 0.7
    patience: int = 8
    min_delta: float = 0.01
    min_steps: int = 8
    length_floor: float = 0.5
    lock_ratio: float | None = 0.9
    lock_flip_rate: float = 0.05
    min_rise: float | None = 0.1

    def __post_init__(self) -> None:
        if not 0 <= self.smoothing < 1:
            raise UserError(f"LabelFreeStopping: smoothing must be in [0, 1), got {self.smoothing!r}")
        for name in ("patience", "min_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"LabelFreeStopping: {name} must be an integer >= 1, got {v!r}")
        if not self.min_delta >= 0 or not 0 <= self.length_floor < 1:
            raise UserError(f"LabelFreeStopping: need min_delta >= 0 and 0 <= length_floor < 1, got {self.min_delta}, "
                             f"{self.length_floor}")
        for name, value, nullable in (("lock_ratio", self.lock_ratio, True),
                                      ("lock_flip_rate", self.lock_flip_rate, False),
                                      ("min_rise", self.min_rise, True)):
            if value is None and nullable:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise UserError(f"LabelFreeStopping: {name} must be a share in [0, 1]{' or null' if nullable else ''}, "
                                f"got {value!r}")


def smoothed(values: Sequence[float], a: float) -> list[float]:
    """EMA of ``values``: ``s_0 = x_0``, ``s_t = a s_{t-1} + (1 - a) x_t``."""
    out: list[float] = []
    for x in values:
        out.append(float(x) if not out else a * out[-1] + (1 - a) * float(x))
    return out


def smoothed_present(values: Sequence[float | None], a: float) -> list[float | None]:
    """:func:`smoothed` over the values that are present (not None or NaN), None at the steps without one."""
    out: list[float | None] = []
    last: float | None = None
    for x in values:
        if x is None or x != x:
            out.append(None)
            continue
        last = float(x) if last is None else a * last + (1 - a) * float(x)
        out.append(last)
    return out


def _best_before_window(ratio: Sequence[float], raw: Sequence[float], t: int, rule: StoppingRule
                        ) -> float | None:
    """The best smoothed majority ratio before the plateau's window (the last ``patience`` steps up to ``t``),
    or None while there is no plateau to test at ``t``: the window needs a step before it, and with ``min_rise``
    that step must lie past the first ``patience`` steps and the best there must stand ``min_rise`` above the
    start level (the mean of the first ``patience`` raw values)."""
    p = rule.patience
    if rule.min_rise is None:
        return max(ratio[: t + 1 - p]) if t >= p else None
    if t + 1 - p <= p:
        return None
    best = max(ratio[p: t + 1 - p])
    start = sum(raw[:p]) / p
    return best if best >= start + rule.min_rise else None


def stop_decision(history: Mapping[str, Sequence[float]], rule: StoppingRule = StoppingRule()
                  ) -> tuple[int, str] | None:
    """``(index, reason)`` of the first step (0-based, in ``history``'s order; ``index >= rule.min_steps``)
    at which the rule fires, or None.
    ``history[MAJORITY_RATIO]`` is required; ``history[COMPLETION_LEN]`` and ``history[FLIP_RATE]`` (None or NaN
    at the steps that logged none) are optional."""
    ratio = smoothed(history[MAJORITY_RATIO], rule.smoothing)
    length = smoothed(history.get(COMPLETION_LEN, ()), rule.smoothing)
    flips = smoothed_present(history.get(FLIP_RATE, ()), rule.smoothing)
    for t in range(rule.min_steps, len(ratio)):  # t >= min_steps for every signal
        if length and t < len(length) and length[t] < rule.length_floor * length[0]:
            return t, f"completion length fell below {rule.length_floor:g} x its first value"
        if (rule.lock_ratio is not None and t < len(flips) and flips[t] is not None
                and flips[t] <= rule.lock_flip_rate and ratio[t] >= rule.lock_ratio):
            return t, (f"locked in: smoothed flip rate {flips[t]:.3f} <= {rule.lock_flip_rate:g} with smoothed "
                       f"majority ratio {ratio[t]:.3f} >= {rule.lock_ratio:g}")
        before = _best_before_window(ratio, history[MAJORITY_RATIO], t, rule)
        if before is not None and max(ratio[t + 1 - rule.patience: t + 1]) <= before + rule.min_delta:
            rose = "" if rule.min_rise is None else f", after a rise of >= {rule.min_rise:g} over its start"
            return t, (f"smoothed majority ratio set no new high (+{rule.min_delta:g}) in {rule.patience} "
                       f"steps{rose}")
    return None


class LabelFreeStopping(pl.Callback):
    """Stops (``mode="stop"``) or flags (``mode="flag"``) a TTRL run by :func:`stop_decision` (module
    docstring); its history is saved in checkpoints, so a resumed run decides as the uninterrupted one.
    ``stop/flagged_step`` and ``flagged["step"]`` are the 0-based index of the training batch that fired the
    rule (``trainer.fit_loop.total_batch_idx``, the step its ``train/*`` values are logged under), not
    ``trainer.global_step``."""

    def __init__(self, mode: str = "stop", smoothing: float = 0.7, patience: int = 8, min_delta: float = 0.01,
                 min_steps: int = 8, length_floor: float = 0.5, lock_ratio: float | None = 0.9,
                 lock_flip_rate: float = 0.05, min_rise: float | None = 0.1):
        if mode not in ("stop", "flag"):
            raise UserError(f"LabelFreeStopping: mode must be 'stop' or 'flag', got {mode!r}")
        self.mode = mode
        self.rule = StoppingRule(smoothing, patience, min_delta, min_steps, length_floor, lock_ratio, lock_flip_rate,
                                 min_rise)
        self.history: dict[str, list[float]] = {MAJORITY_RATIO: [], COMPLETION_LEN: [], FLIP_RATE: []}
        self.steps: list[int] = []
        self.flagged: dict | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        if not hasattr(pl_module, "voting"):  # TTRLModule logs the majority ratio the rule reads
            raise UserError(f"LabelFreeStopping reads {MAJORITY_RATIO!r}, which only TTRLModule logs; the run's "
                            f"module is {type(pl_module).__name__}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        metrics = trainer.callback_metrics
        if MAJORITY_RATIO not in metrics:
            raise UserError(f"LabelFreeStopping reads {MAJORITY_RATIO!r}, which the module does not log "
                               "(use it with TTRLModule)")
        for key in (MAJORITY_RATIO, COMPLETION_LEN):
            if key in metrics:
                value = torch.as_tensor(metrics[key], dtype=torch.float32, device=pl_module.device).detach().clone()
                self.history[key].append(float(trainer.strategy.reduce(value, reduce_op="mean")))
        # the flip rate is logged only once questions come round again: NaN at the steps without it (the same
        # on every rank: each rank's step sees its own questions again after the same number of epochs)
        flip = getattr(pl_module, "last_step_metrics", {}).get(FLIP_RATE)
        value = torch.as_tensor(float("nan") if flip is None else flip, dtype=torch.float32,
                                device=pl_module.device).detach().clone()
        self.history.setdefault(FLIP_RATE, []).append(float(trainer.strategy.reduce(value, reduce_op="mean")))
        self.steps.append(int(trainer.fit_loop.total_batch_idx))  # 0-based, the batch's logged step
        ratio = smoothed(self.history[MAJORITY_RATIO], self.rule.smoothing)[-1]
        pl_module.log("stop/majority_ratio_smoothed", ratio, on_step=True, on_epoch=False)
        if self.flagged is not None:
            return
        decision = stop_decision(self.history, self.rule)
        if decision is None:
            return
        index, reason = decision
        self.flagged = {"step": self.steps[index], "reason": reason}
        pl_module.log("stop/flagged_step", float(self.steps[index]), on_step=True, on_epoch=False)
        if self.mode == "stop":
            from lightning.pytorch.utilities import rank_zero_info

            rank_zero_info(f"LabelFreeStopping: stopping after step {self.steps[index]} (0-based): {reason}")
            trainer.should_stop = True

    def state_dict(self) -> dict:
        return {"history": self.history, "steps": self.steps, "flagged": self.flagged, "rule": asdict(self.rule)}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict.get("rule")
        if saved is not None:  # a rule saved before the lock-in signal or the rise existed had neither
            saved = {"lock_ratio": None, "lock_flip_rate": StoppingRule.lock_flip_rate, "min_rise": None, **saved}
        if saved not in (None, asdict(self.rule)):
            raise UserError(f"LabelFreeStopping: the checkpoint's rule {state_dict['rule']} is not this run's "
                             f"{asdict(self.rule)}")
        self.history = {k: list(v) for k, v in state_dict.get("history", self.history).items()}
        self.steps = list(state_dict.get("steps", []))
        flips = self.history.setdefault(FLIP_RATE, [])  # a history saved before the flip rate was read
        flips[:0] = [float("nan")] * (len(self.history[MAJORITY_RATIO]) - len(flips))
        self.flagged = state_dict.get("flagged")

"""KL control: every ``PID_FORMS`` controller on a fixed family of simulated plants and on a tiny GRPO run.

Plant family (defined before any controller was measured on it, and kept). Every plant starts at KL 0
(the policy equals its anchor at step 0), the controller starts at beta_0 = 0.04 with the paper's
gains (Pixelis appendix 6.1: target 0.15, corridor [0.10, 0.20], Kp 0.30, Ki 0.05, Kd 0.10, I_max 5,
warm-up 100 with Kd = 0, EMA tau 0.9, beta in [1e-3, 1e2]), and runs 3,000 steps. One step:

    beta_t = controller.update(k_obs_t)                            the callback's timing
    k_{t+1} = k_t + rate * (c_t / beta_t^gamma - k_t)              first-order lag toward the static KL
    k_obs_t = k_t * exp(sigma z_t - sigma^2 / 2), z_t ~ N(0, 1)     multiplicative (mean-preserving) noise

c is set by the beta the plant needs: c = 0.15 * (ratio * beta_0)^gamma, so beta* = ratio * beta_0 holds
the static KL at 0.15.

    matched      ratio 1,    gamma 1,   rate 0.02
    up10         ratio 10,   gamma 1,   rate 0.02
    down10       ratio 0.1,  gamma 1,   rate 0.02
    up100        ratio 100,  gamma 1,   rate 0.02   (needed beta 100x the starting one)
    up100_fast   ratio 100,  gamma 1,   rate 0.2
    up100_sqrt   ratio 100,  gamma 0.5, rate 0.02
    fast_up10    ratio 10,   gamma 1,   rate 0.2
    shift        ratio 1,    gamma 1,   rate 0.02, c doubled on steps [1000, 2000) (distribution shift)
    noise        ratio 10,   gamma 1,   rate 0.02, sigma 0.2 (noisy KL estimate)

Metrics, on the smoothed plant KL S_t (EMA tau 0.9 of k_t; for the noise plant that is the noise-free KL,
which is what the corridor is about, while the controller sees the noisy one):
    rise       first step with S_t >= 0.9 * target
    overshoot  max(S_t, t >= rise) / target - 1
    settle     first step from which S_t stays in the corridor to the end
    in corr.   share of the steps from the rise on with the smoothed KL the controller logs in the corridor
    P95        95th percentile of the observed per-step KL from the rise on
    ok         S_t stays in the corridor from its first entry on, rise < 200 and overshoot < 10%
    (the paper's claims; "-" marks a miss).
Start-up bound per plant ("bound" rows; it says nothing about the shift at step 1000): with Kd = 0 in warm-up, a PI-type controller with positive gains keeps
beta <= beta_0 as long as the error is negative, i.e. until S reaches the target. The bound holds beta_0 until
then and beta_max afterwards (the strongest possible reaction); if even that overshoots by >= 10%, no form of
this family can meet the claim on that plant.

Real run: ``GRPOModule`` on the tiny random Qwen2 (the settings of ``configs/rft/tiny_grpo_fast.yaml`` with a
learning rate of 1e-2 so that the KL to the EMA anchor reaches the corridor within the run), EMA anchor
(rho 0.99), ``PIDKLController`` of each form, ``--real-steps`` steps on CPU (same seed for every form).

    python -m benchmarks.training.kl_control                       # plants + real run (200 steps per controller,
                                                                               1-5 min on 2 cores)
    python -m benchmarks.training.kl_control --real-steps 0        # plants only (seconds)

Writes ``<out>/kl_control.json`` and step-response plots ``<out>/plant_<name>.png``, ``<out>/real_grpo.png``.
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

from ttrl_lightning.callbacks.pid import PIDController  # noqa: E402
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec

BETA_0 = 0.04
TARGET, CORRIDOR, SMOOTHING = 0.15, (0.10, 0.20), 0.9
STEPS = 3000


@dataclass(frozen=True)
class Plant:
    ratio: float = 1.0
    gamma: float = 1.0
    rate: float = 0.02
    sigma: float = 0.0
    shift: tuple[int, int, float] | None = None  # (start, end, factor on c)

    def c(self, t: int) -> float:
        c0 = TARGET * (self.ratio * BETA_0) ** self.gamma
        if self.shift is not None and self.shift[0] <= t < self.shift[1]:
            return c0 * self.shift[2]
        return c0


PLANTS = {
    "matched": Plant(),
    "up10": Plant(ratio=10),
    "down10": Plant(ratio=0.1),
    "up100": Plant(ratio=100),
    "up100_fast": Plant(ratio=100, rate=0.2),
    "up100_sqrt": Plant(ratio=100, gamma=0.5),
    "fast_up10": Plant(ratio=10, rate=0.2),
    "shift": Plant(shift=(1000, 2000, 2.0)),
    "noise": Plant(ratio=10, sigma=0.2),
}

# label -> PIDController keyword arguments (the paper's gains are the controller's defaults)
CONTROLLERS = {
    "fixed": dict(form="fixed"),
    "ziegler": dict(form="ziegler"),
    "positional": dict(form="positional"),
    "incremental": dict(form="incremental"),
    "log": dict(form="log"),
    "log/immediate": dict(form="log", integral_start="immediate"),
    "log/corridor": dict(form="log", integral_start="corridor"),
    "log/clip0.2": dict(form="log", error_clip=(-0.2, 0.2)),
}
REAL_CONTROLLERS = ("fixed", "ziegler", "positional", "incremental", "log")


class BoundController:
    """beta_0 until the smoothed KL reaches the target, beta_max afterwards (the physics bound)."""

    def __init__(self, beta_max: float = 1e2):
        self.s, self.on, self.beta_max = None, False, beta_max
        self.state = self

    @property
    def kl_smoothed(self):
        return self.s

    def update(self, kl: float) -> float:
        self.s = kl if self.s is None else SMOOTHING * self.s + (1 - SMOOTHING) * kl
        self.on = self.on or self.s >= TARGET
        return self.beta_max if self.on else BETA_0


def simulate(plant: Plant, controller, steps: int = STEPS, seed: int = 0) -> dict[str, list[float]]:
    rng = random.Random(seed)
    k, s_true = 0.0, None
    trace = {"kl_obs": [], "kl_smoothed": [], "kl_smoothed_obs": [], "beta": []}
    for t in range(steps):
        obs = k * math.exp(plant.sigma * rng.gauss(0.0, 1.0) - plant.sigma ** 2 / 2) if plant.sigma else k
        beta = controller.update(obs)
        s_true = k if s_true is None else SMOOTHING * s_true + (1 - SMOOTHING) * k
        trace["kl_obs"].append(obs)
        trace["kl_smoothed"].append(s_true)
        trace["kl_smoothed_obs"].append(controller.state.kl_smoothed)
        trace["beta"].append(beta)
        k = k + plant.rate * (plant.c(t) / beta ** plant.gamma - k)
    return trace


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def step_metrics(trace: dict[str, list[float]], target: float = TARGET,
                 corridor: tuple[float, float] = CORRIDOR) -> dict:
    """The metrics of the module docstring (None where a quantity is never reached)."""
    s, lo, hi = trace["kl_smoothed"], corridor[0], corridor[1]
    inside = [lo <= x <= hi for x in s]
    rise = next((t for t, x in enumerate(s) if x >= 0.9 * target), None)
    settle = next((t for t in range(len(s)) if all(inside[t:])), None)
    entry = next((t for t, x in enumerate(inside) if x), None)
    out = {"rise": rise, "overshoot": None, "settle": settle, "in_corridor": None, "kl_p95": None,
           "held": entry is not None and all(inside[entry:]), "final_kl": s[-1], "final_beta": trace["beta"][-1]}
    if rise is not None:
        out["overshoot"] = max(s[rise:]) / target - 1
        obs_s = trace["kl_smoothed_obs"][rise:]
        out["in_corridor"] = sum(lo <= x <= hi for x in obs_s) / len(obs_s)
        out["kl_p95"] = _percentile(trace["kl_obs"][rise:], 0.95)
    out["ok"] = bool(out["held"] and rise is not None and rise < 200 and out["overshoot"] < 0.10)
    return out


def run_plants(steps: int = STEPS) -> dict:
    results = {}
    for name, plant in PLANTS.items():
        rows = {}
        for label, kw in CONTROLLERS.items():
            trace = simulate(plant, PIDController(beta_0=BETA_0, **kw), steps)
            rows[label] = {"metrics": step_metrics(trace), "trace": trace}
        trace = simulate(plant, BoundController(), steps)
        rows["bound"] = {"metrics": step_metrics(trace), "trace": trace}
        results[name] = rows
    return results


# ---------------------------------------------------------------------------------------------- real run
def _tiny_grpo(lr: float, seed: int):
    from ttrl_lightning.modules import GRPOModule

    policy = {"model": "tiny:qwen2", "lr": lr, "seed": seed}
    if "policy" in inspect.signature(GRPOModule).parameters:
        kw = {"policy": policy}
    else:  # the signature before PolicySpec
        kw = dict(policy)
    return GRPOModule(**kw, num_generations=4, sampling=SamplingSpec(max_new_tokens=4),
                      grpo=GRPOSpec(kl_coef=BETA_0, reference="external"))


def run_real(steps: int, lr: float = 1e-2, seed: int = 0) -> dict:
    import lightning.pytorch as pl

    from ttrl_lightning.callbacks import EMAAnchor
    from ttrl_lightning.callbacks.pid import PIDKLController
    from ttrl_lightning.data.datamodules import PromptDataModule

    class Recorder(pl.Callback):
        def __init__(self, pid: PIDKLController):
            self.pid = pid
            self.trace = {"kl_obs": [], "kl_smoothed": [], "kl_smoothed_obs": [], "beta": []}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            state = self.pid.controller.state
            self.trace["kl_obs"].append(float(pl_module.kl_observation))
            self.trace["kl_smoothed"].append(state.kl_smoothed)
            self.trace["kl_smoothed_obs"].append(state.kl_smoothed)
            self.trace["beta"].append(state.beta)

    results = {}
    for label in REAL_CONTROLLERS:
        pl.seed_everything(seed, verbose=False)
        module = _tiny_grpo(lr, seed)
        data = PromptDataModule(task="arith", n_train=16, n_val=4, batch_size=4, seed=seed)
        pid = PIDKLController(**CONTROLLERS[label])
        rec = Recorder(pid)
        trainer = pl.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                             limit_val_batches=0, callbacks=[EMAAnchor(rho=0.99), pid, rec])
        t0 = time.perf_counter()
        trainer.fit(module, data)
        results[label] = {"metrics": step_metrics(rec.trace), "trace": rec.trace,
                          "seconds": time.perf_counter() - t0}
    return results


# ---------------------------------------------------------------------------------------------- report
def _fmt(v, kind):
    if v is None:
        return "-"
    if kind == "pct":
        return f"{100 * v:.0f}%"
    if kind == "kl":
        return f"{v:.3f}"
    if kind == "beta":
        return f"{v:.3g}"
    return str(v)


HEADER = (f"{'controller':<14} {'rise':>5} {'overshoot':>9} {'settle':>6} {'in corr.':>8} {'KL P95':>7} "
          f"{'final KL':>8} {'beta':>7} {'ok':>3}")


def format_rows(rows: dict) -> list[str]:
    lines = [HEADER]
    for label, r in rows.items():
        m = r["metrics"]
        lines.append(f"{label:<14} {_fmt(m['rise'], 'int'):>5} {_fmt(m['overshoot'], 'pct'):>9} "
                     f"{_fmt(m['settle'], 'int'):>6} {_fmt(m['in_corridor'], 'pct'):>8} "
                     f"{_fmt(m['kl_p95'], 'kl'):>7} {_fmt(m['final_kl'], 'kl'):>8} "
                     f"{_fmt(m['final_beta'], 'beta'):>7} {'yes' if m['ok'] else '-':>3}")
    return lines


def plot(rows: dict, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_kl, ax_beta) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for label, r in rows.items():
        style = {"color": "black", "linestyle": ":"} if label == "bound" else {}
        ax_kl.plot(r["trace"]["kl_smoothed"], label=label, linewidth=1, **style)
        ax_beta.plot(r["trace"]["beta"], label=label, linewidth=1, **style)
    ax_kl.axhspan(*CORRIDOR, color="green", alpha=0.1)
    ax_kl.axhline(TARGET, color="green", linewidth=0.8)
    top = max(0.3, min(1.0, max(max(r["trace"]["kl_smoothed"]) for r in rows.values()) * 1.05))
    ax_kl.set_ylim(0, top)
    ax_kl.set_ylabel("smoothed KL")
    ax_kl.set_title(title)
    ax_kl.legend(fontsize=7, ncol=3)
    ax_beta.set_yscale("log")
    ax_beta.set_ylabel("beta")
    ax_beta.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS, help="simulated steps per plant")
    ap.add_argument("--real-steps", type=int, default=200, help="GRPO steps per controller (0: skip)")
    ap.add_argument("--real-lr", type=float, default=1e-2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="outputs/kl_control")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    plants = run_plants(args.steps)
    for name, rows in plants.items():
        p = PLANTS[name]
        print(f"\nplant {name}: ratio {p.ratio:g}, gamma {p.gamma:g}, rate {p.rate:g}, sigma {p.sigma:g}"
              + (f", c x{p.shift[2]:g} on [{p.shift[0]}, {p.shift[1]})" if p.shift else ""))
        print("\n".join(format_rows(rows)))
        if not args.no_plots:
            plot(rows, f"plant {name}", out / f"plant_{name}.png")
    summary = {label: [n for n in PLANTS if plants[n][label]["metrics"]["ok"]] for label in CONTROLLERS}
    feasible = [n for n in PLANTS if (plants[n]["bound"]["metrics"]["overshoot"] or 0.0) < 0.10]
    print(f"\nplants where the start-up bound allows overshoot < 10%: {', '.join(feasible)} "
          f"(bound overshoot elsewhere: " + ", ".join(
              f"{n} {100 * plants[n]['bound']['metrics']['overshoot']:.0f}%" for n in PLANTS if n not in feasible) + ")")
    for label, ok in summary.items():
        print(f"{label:<14} meets rise < 200, overshoot < 10%, held in corridor on: {', '.join(ok) or 'none'}")

    real = {}
    if args.real_steps > 0:
        import torch

        torch.set_num_threads(args.threads)
        real = run_real(args.real_steps, lr=args.real_lr)
        print(f"\nreal tiny GRPO run ({args.real_steps} steps, lr {args.real_lr:g}, beta_0 {BETA_0}; "
              f"metrics on the controller's smoothed KL)")
        print("\n".join(format_rows(real)))
        print("seconds per run: " + ", ".join(f"{k} {v['seconds']:.0f}" for k, v in real.items()))
        if not args.no_plots:
            plot(real, f"tiny GRPO, lr {args.real_lr:g}", out / "real_grpo.png")

    result = {"plants": {n: {lbl: r["metrics"] for lbl, r in rows.items()} for n, rows in plants.items()},
              "plant_definitions": {n: vars(p) for n, p in PLANTS.items()},
              "controllers": CONTROLLERS, "meets_claims_on": summary, "bound_feasible": feasible,
              "real": {lbl: {**r["metrics"], "seconds": r["seconds"]} for lbl, r in real.items()},
              "real_settings": {"steps": args.real_steps, "lr": args.real_lr, "beta_0": BETA_0}}
    (out / "kl_control.json").write_text(json.dumps(result, indent=1, default=list))
    print(f"\nwrote {out / 'kl_control.json'}" + ("" if args.no_plots else f" and plots under {out}/"))
    return result


if __name__ == "__main__":
    main()

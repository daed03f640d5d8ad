"""The ``ttrl fit`` runs the demos are made of: seeds, an in-process run, its checkpoint and its logged curves
(``cli.demo`` and ``cli.demo_vlm``; the benchmarks that rerun a demo's protocol use them too)."""
from __future__ import annotations

import glob
import os

from .configs import config_path

__all__ = ["seed_args", "fit_in_process", "last_checkpoint", "run_sft", "DEMO_CURVES", "logged_curves", "add_rows",
           "logged_value", "curve_mean"]


def seed_args(run_seed: int, data_seed: int) -> list[str]:
    """Seed options of a ``ttrl fit`` run: the configs' ``${seed_everything}`` interpolations are resolved when
    the file is read, so a later ``--seed_everything`` alone would not reach them; the policy seed (the root of
    every derived seed: sampling, dropout masks) and the data seed are set explicitly."""
    return ["--seed_everything", str(run_seed), "--model.init_args.policy.seed", str(run_seed),
            "--data.init_args.seed", str(data_seed)]


def fit_in_process(args: list[str]):
    """Run ``ttrl fit`` in this process; returns the LightningCLI (its trainer and module)."""
    from .fit import make_cli

    return make_cli(["fit", *args])


def last_checkpoint(root: str) -> str | None:
    """The newest checkpoint file under ``root`` (an earlier run's, for ``--reuse-sft``)."""
    found = sorted(glob.glob(os.path.join(root, "**", "*.ckpt"), recursive=True), key=os.path.getmtime)
    return found[-1] if found else None


def _run_checkpoint(cli) -> str:
    """The checkpoint the run just wrote (its checkpoint callback's last or best file)."""
    cb = cli.trainer.checkpoint_callback
    path = (getattr(cb, "last_model_path", "") or getattr(cb, "best_model_path", "")) if cb is not None else ""
    if not path or not os.path.exists(path):
        raise RuntimeError("the run wrote no checkpoint (enable its ModelCheckpoint)")
    return path


def run_sft(config: str, root: str, seed_value: int, steps: int | None, extra: list[str] = ()) -> str:
    """``ttrl fit`` of the packaged SFT ``config`` under ``root``, seeded by ``seed_value`` (``steps``: instead of
    the config's; ``extra``: more options), with a CSV log; returns the checkpoint it wrote."""
    args = ["--config", config_path(config), "--trainer.default_root_dir", root, *seed_args(seed_value, seed_value),
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", *extra]
    if steps:
        args += ["--trainer.max_steps", str(steps)]
    return _run_checkpoint(fit_in_process(args))


#: the logged metrics the demo plots and averages
DEMO_CURVES = ("train/kl_p95", "train/label_accuracy", "train/coverage")


def logged_curves(trainer, keys: tuple[str, ...] = DEMO_CURVES) -> dict[str, list[tuple[int, float]]]:
    """``(step, value)`` points of every metric named in ``keys`` and of the per-validation ``val/avg@k`` from
    the run's CSV log (empty when the run has no CSV logger)."""
    import csv

    logger = trainer.logger
    path = os.path.join(logger.log_dir, "metrics.csv") if logger is not None else None
    curves: dict[str, list[tuple[int, float]]] = {}
    if not path or not os.path.exists(path):
        return curves
    with open(path, newline="") as fh:
        add_rows(curves, csv.DictReader(fh), keys)
    return curves


def add_rows(curves: dict[str, list[tuple[int, float]]], rows, keys) -> None:
    """Append to ``curves`` the ``(step, value)`` points of CSV log ``rows`` (``csv.DictReader`` rows) for every
    metric named in ``keys`` and every ``val/avg@k``, skipping the cells without a value (:func:`logged_value`)."""
    for row in rows:
        for key, cell in row.items():
            if key.startswith("val/avg@") or key in keys:
                value = logged_value(cell)
                if value is not None:
                    curves.setdefault(key, []).append((int(row["step"]), value))


def logged_value(cell: str | None) -> float | None:
    """A CSV log cell as a number: None where the step has no value (empty: the metric was not logged that
    row; ``nan``: a step metric the step did not have, ``modules.grpo.with_gaps``)."""
    if cell in ("", None):
        return None
    value = float(cell)
    return None if value != value else value


def curve_mean(points: list[tuple[int, float]]) -> float | None:
    """The mean of a curve's values (None for no points)."""
    return sum(v for _, v in points) / len(points) if points else None

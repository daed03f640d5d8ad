"""One ``ttrl fit`` run of a study, from data: a config composed of a packaged (or user) config and nested
overrides, run in this process, and what it leaves (its checkpoint, its logged curves).

A run's config is the base YAML merged with the study's and the arm's overrides (OmegaConf's merge: a mapping
merges key by key, anything else replaces), written beside the run as ``study_run.yaml`` and given to
``ttrl fit --config``: the file alone says what ran.
"""
from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["compose_config", "write_config", "fit_in_process", "run_checkpoint",
           "RUN_CURVES", "logged_curves", "add_rows", "logged_value", "curve_mean", "seed_overrides"]


def compose_config(base: str, *overrides: Mapping) -> dict:
    """The config file ``base`` (a path, or a packaged name such as ``ttrl/tiny_demo.yaml``) with each of
    ``overrides`` merged in order; interpolations (``${seed_everything}``) are kept for ``ttrl fit`` to resolve."""
    from omegaconf import OmegaConf

    from ..cli.configs import config_path

    path = base if os.path.exists(base) else config_path(base)
    merged = OmegaConf.merge(OmegaConf.load(path), *[OmegaConf.create(dict(o)) for o in overrides if o])
    return OmegaConf.to_container(merged, resolve=False)


def write_config(config: Mapping, path: str) -> str:
    """``config`` as YAML at ``path`` (atomically); returns ``path``."""
    from omegaconf import OmegaConf

    from ..safe_files import atomic_write

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with atomic_write(path) as fh:
        fh.write(OmegaConf.to_yaml(OmegaConf.create(dict(config))))
    return path


def seed_overrides(run_seed: int, data_seed: int) -> dict:
    """The seeds of a run as overrides: ``seed_everything``, the policy seed (the root of every derived seed:
    sampling, dropout masks, random rewards) and the data seed (generation and shuffling)."""
    return {"seed_everything": run_seed, "model": {"init_args": {"policy": {"seed": run_seed}}},
            "data": {"init_args": {"seed": data_seed}}}


def fit_in_process(args: list[str], command: str = "fit"):
    """Run ``ttrl fit`` (or ``validate``) in this process; returns the LightningCLI (its trainer and module)."""
    from ..cli.fit import make_cli

    return make_cli([command, *args])


def run_checkpoint(cli) -> str:
    """The checkpoint the run just wrote (its checkpoint callback's last or best file)."""
    cb = cli.trainer.checkpoint_callback
    path = (getattr(cb, "last_model_path", "") or getattr(cb, "best_model_path", "")) if cb is not None else ""
    if not path or not os.path.exists(path):
        raise RuntimeError("the run wrote no checkpoint (enable its ModelCheckpoint)")
    return path


#: the logged metrics a study keeps per run (its curves and its run means)
RUN_CURVES = ("train/kl_p95", "train/label_accuracy", "train/coverage", "train/vote_accuracy",
               "train/reward_accuracy", "train/majority_ratio", "train/completion_len", "train/flip_rate")


def logged_curves(trainer, keys: tuple[str, ...] = RUN_CURVES) -> dict[str, list[tuple[int, float]]]:
    """``(step, value)`` points of every metric named in ``keys`` and of every ``val/avg@k`` from the run's CSV
    log (the first CSV logger among the trainer's loggers; empty when it has none)."""
    from lightning.pytorch.loggers import CSVLogger

    curves: dict[str, list[tuple[int, float]]] = {}
    logger = next((lg for lg in trainer.loggers if isinstance(lg, CSVLogger)), None)
    path = os.path.join(logger.log_dir, "metrics.csv") if logger is not None else None
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


def curve_mean(points: list[tuple[int, float]] | None) -> float | None:
    """The mean of a curve's values (None for no points)."""
    return sum(v for _, v in points) / len(points) if points else None


def nested(d: Mapping, *keys: str, default: Any = None) -> Any:
    """``d[k1][k2]...`` or ``default`` where a level is missing."""
    for key in keys:
        if not isinstance(d, Mapping) or key not in d:
            return default
        d = d[key]
    return d

"""Where a study's runs start: one builder per ``start.kind`` (:data:`START_KINDS`), each returning the start's
checkpoint for one start seed.

* ``checkpoint``: the given folder or ``.ckpt``, as it is;
* ``sft``: ``ttrl fit`` of the SFT config (``start.config`` with ``start.overrides``), seeded by the start seed,
  its traces skipping every question of the study's splits (``start.exclude_splits``: the SFT data module's
  ``exclude``, by problem);
* ``warmup``: SRT's curriculum step, gold-reward RL from ``start.path`` on the questions of split
  ``start.split`` for ``start.epochs`` epochs with the study's TTRL config, saved as a checkpoint folder.

A start is built once per start seed and kept under ``<out>/starts/start<seed>/``; the record binds it to the
digest of its weights (``study.record``).
"""
from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..registry import Registry
from .runs import compose_config, fit_in_process, run_checkpoint, seed_overrides, write_config
from .spec import StudySpec

__all__ = ["START_KINDS", "StartContext", "csv_logger", "file_data"]


@dataclass(frozen=True)
class StartContext:
    spec: StudySpec
    start_seed: int
    folder: str
    paths: Mapping[str, str]


#: ``start.kind`` -> ``fn(context) -> checkpoint path``
START_KINDS: Registry[Callable[[StartContext], str]] = Registry("study start kind")


def csv_logger(root: str) -> dict:
    """A CSV logger under ``root`` (what a study reads a run's curves from)."""
    return {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": root}}


@START_KINDS.register("checkpoint")
def checkpoint_start(ctx: StartContext) -> str:
    path = ctx.spec.start.path
    if not os.path.exists(path):
        raise FileNotFoundError(2, "no such checkpoint (start.path)", path)
    return path


@START_KINDS.register("sft")
def sft_start(ctx: StartContext) -> str:
    s = ctx.spec.start
    trainer = {"default_root_dir": ctx.folder, "logger": csv_logger(ctx.folder)}
    if s.steps:
        trainer["max_steps"] = s.steps
    overrides = [s.overrides, seed_overrides(ctx.start_seed, ctx.start_seed), {"trainer": trainer}]
    if s.exclude_splits:
        overrides.append({"data": {"init_args": {"exclude": list(ctx.paths.values())}}})
    config = write_config(compose_config(s.config, *overrides), os.path.join(ctx.folder, "study_start.yaml"))
    cli = fit_in_process(["--config", config])
    path = run_checkpoint(cli)
    del cli
    gc.collect()
    return path


@START_KINDS.register("warmup")
def warmup_start(ctx: StartContext) -> str:
    s, t = ctx.spec.start, ctx.spec.train
    run = os.path.join(ctx.folder, "run")
    overrides = [t.overrides, s.overrides, seed_overrides(ctx.start_seed, ctx.start_seed),
                 {"model": {"init_args": {"policy": {"model": s.path}, "voting": {"labeler": "gold_reward"}}},
                  "data": {"class_path": "ttrl_lightning.data.questions.QuestionDataModule",
                           "init_args": {"path": ctx.paths[s.split]}},
                  "trainer": {"max_epochs": s.epochs, "default_root_dir": run, "logger": csv_logger(run)}}]
    config = compose_config(t.config, *overrides)
    config["data"]["init_args"] = file_data(config["data"]["init_args"], ctx.paths[s.split])
    cli = fit_in_process(["--config", write_config(config, os.path.join(ctx.folder, "study_start.yaml"))])
    policy, tokenizer = cli.model.policy.eval(), cli.model.tokenizer
    folder = os.path.join(ctx.folder, "checkpoint")
    tmp = folder + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    del cli, policy
    gc.collect()
    return folder


#: the data module options a study keeps from a config when it points the data at its own question files
KEPT_DATA_OPTIONS = ("batch_size", "shuffle", "num_workers", "seed")


def file_data(init_args: Mapping, path: str, val_path: str | None = None, calibration_path: str | None = None
               ) -> dict:
    """A ``QuestionDataModule``'s options reading the study's files: the config's batching and seed kept, its
    generated-task options (``task``, ``n``, ``val_task``, ...) dropped."""
    out = {k: v for k, v in init_args.items() if k in KEPT_DATA_OPTIONS}
    out["path"] = path
    if val_path:
        out["val_path"] = val_path
    if calibration_path:
        out["calibration_path"] = calibration_path
    return out

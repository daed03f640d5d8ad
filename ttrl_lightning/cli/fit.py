"""``ttrl fit|validate``: the LightningCLI entry of every training phase.

Configs name classes by ``class_path``/``init_args`` (subclass mode) for the model and the data, and the
YAML is read with OmegaConf, so ``${...}`` interpolation works inside a config::

    ttrl fit --config configs/sft/tiny_arith.yaml
    ttrl fit --config configs/rft/tiny_grpo.yaml --config configs/scale/ddp_cpu.yaml --trainer.max_steps=20
    ttrl fit --config configs/rft/tiny_grpo.yaml --print_config

Defaults: a Weights & Biases logger in offline mode (``WANDB_MODE=offline`` unless the environment sets it;
no account or network needed; ``wandb sync`` uploads later) and a Rich progress bar (plain text, no
terminal codes, when the output is not a terminal).

Where a run writes: everything lands under ``trainer.default_root_dir`` (``outputs/`` when the config sets
none). A W&B logger without its own ``save_dir`` logs there, so the run folder is
``<root>/<project>/<run id>/`` holding ``checkpoints/`` and the resolved ``config.yaml`` (one per run: runs
never overwrite each other's config). ``ttrl fit`` ends by printing the checkpoint and config paths.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator

from . import quiet

quiet.install()

import lightning.pytorch as pl  # noqa: E402  (after the noise filters)
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar  # noqa: E402
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback  # noqa: E402
from lightning.pytorch.loggers import WandbLogger  # noqa: E402

#: where a run writes when its config sets no ``trainer.default_root_dir``
DEFAULT_ROOT_DIR = "outputs"
#: the logger of every config that names none (``save_dir`` follows the trainer's root dir, see module doc)
DEFAULT_LOGGER = {
    "class_path": "lightning.pytorch.loggers.WandbLogger",
    "init_args": {"project": "ttrl_lightning", "offline": True},
}
#: ``WandbLogger``'s own ``save_dir`` default: "not set by the config"
_WANDB_UNSET_SAVE_DIR = (None, ".")


def _import_class(path: str) -> type | None:
    module, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None


def _wandb_logger_configs(logger_cfg) -> list:
    """The ``class_path``/``init_args`` entries of ``trainer.logger`` that build a ``WandbLogger``."""
    entries = logger_cfg if isinstance(logger_cfg, list) else [logger_cfg]
    out = []
    for entry in entries:
        class_path = entry.get("class_path") if isinstance(entry, dict) else getattr(entry, "class_path", None)
        cls = _import_class(class_path) if class_path else None
        if isinstance(cls, type) and issubclass(cls, WandbLogger):
            out.append(entry)
    return out


def run_dir(trainer: pl.Trainer) -> str:
    """The folder of this run: the parent of ``ModelCheckpoint``'s default ``checkpoints/`` folder.

    ``<save_dir>/<name>/<version>`` of the first logger (Lightning's own rule for checkpoint folders), or
    ``trainer.default_root_dir`` without a logger. Call after the loggers have started (``setup`` on).
    """
    if trainer.loggers:
        logger = trainer.loggers[0]
        save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
        version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
        return os.path.join(save_dir, str(logger.name), version)
    return trainer.default_root_dir


class RunConfigSaver(SaveConfigCallback):
    """Saves the resolved config as ``<run dir>/config.yaml`` (:func:`run_dir`), beside the checkpoints.

    LightningCLI's own callback writes to ``trainer.log_dir``, which for a W&B logger is the shared
    ``save_dir``: every run overwrote one ``config.yaml`` there.
    """

    config_path: str | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        path = os.path.join(run_dir(trainer), self.config_filename) if trainer.is_global_zero else None
        path = trainer.strategy.broadcast(path)
        if trainer.is_global_zero:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self.parser.save(self.config, path, skip_none=False, overwrite=self.overwrite,
                             multifile=self.multifile)
            self.config_path = path
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


class TTRLCLI(LightningCLI):
    """LightningCLI with the project defaults (offline W&B logger under the run's root dir, Rich bar)."""

    def before_instantiate_classes(self) -> None:
        trainer = self._get(self.config, "trainer")
        if trainer is None:
            return
        root = trainer.get("default_root_dir") or DEFAULT_ROOT_DIR
        for entry in _wandb_logger_configs(trainer.get("logger")):
            init = entry["init_args"] if isinstance(entry, dict) else entry.init_args
            if init.get("save_dir") in _WANDB_UNSET_SAVE_DIR and init.get("dir") is None:
                init["save_dir"] = root

    def _instantiate_trainer(self, config: dict, callbacks: list):
        given = list(config.get("callbacks") or []) + list(callbacks)
        wants_bar = config.get("enable_progress_bar", True) is not False
        if wants_bar and not any(isinstance(c, ProgressBar) for c in given):
            callbacks = list(callbacks) + [RichProgressBar()]
        trainer = super()._instantiate_trainer(config, callbacks)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                quiet.drop_unset_wandb_anonymous(logger)
                if self.subcommand is not None and logger.save_dir:
                    # W&B warns "git root ... does not exist" when its folder is not there yet
                    os.makedirs(logger.save_dir, exist_ok=True)
        return trainer

    def _finish_wandb(self) -> None:
        """End the W&B run now: its summary then prints as plain text (at exit it came with ANSI codes)."""
        wandb = sys.modules.get("wandb")
        if wandb is not None and getattr(wandb, "run", None) is not None:
            wandb.finish()

    def after_fit(self) -> None:
        self._finish_wandb()
        if not self.trainer.is_global_zero:
            return
        ckpt = self.trainer.checkpoint_callback
        if ckpt is None:
            print("checkpoint: none (trainer.enable_checkpointing is false)")
        else:
            print(f"checkpoint: {ckpt.best_model_path or ckpt.last_model_path or 'none saved'}")
        saver = next((c for c in self.trainer.callbacks if isinstance(c, RunConfigSaver)), None)
        if saver is not None and saver.config_path:
            print(f"config:     {saver.config_path}")

    def after_validate(self) -> None:
        self._finish_wandb()


@contextlib.contextmanager
def _command_line(args: list[str] | None) -> Iterator[None]:
    """Make ``sys.argv`` the command being run while LightningCLI runs it.

    LightningCLI reads ``sys.argv`` (and warns when given ``args`` while ``sys.argv`` holds other
    arguments), and Lightning's DDP launcher starts the other local ranks by re-running ``sys.argv``: so a
    command started from Python (``ttrl demo``, tests) runs as ``<prog> <args>``; ``args=None`` keeps the
    real command line.
    """
    if args is None:
        yield
        return
    saved = sys.argv
    sys.argv = [saved[0] if saved else "ttrl", *args]
    try:
        yield
    finally:
        sys.argv = saved


def make_cli(args: list[str] | None, run: bool = True) -> TTRLCLI:
    """Build (and with ``run=True`` run) the CLI; ``args=None`` reads ``sys.argv``."""
    os.environ.setdefault("WANDB_MODE", "offline")
    with _command_line(None if args is None else list(args)):
        return TTRLCLI(
            pl.LightningModule,
            pl.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            trainer_defaults={"logger": DEFAULT_LOGGER},
            # prog: "ttrl" also under `python -m ttrl_lightning.cli`
            parser_kwargs={"parser_mode": "omegaconf", "prog": "ttrl"},
            save_config_callback=RunConfigSaver,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            run=run,
        )


def main(argv: list[str] | None = None) -> int:
    """``argv`` starts with the subcommand (``fit``, ``validate``, ...); ``None`` reads ``sys.argv``."""
    make_cli(None if argv is None else list(argv))
    return 0


def fit_main(argv: list[str]) -> int:
    return main(["fit", *argv])


def validate_main(argv: list[str]) -> int:
    return main(["validate", *argv])

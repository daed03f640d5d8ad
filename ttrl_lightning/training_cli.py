"""``ttrl fit|validate``: the LightningCLI entry of every training phase.

Configs name classes by ``class_path``/``init_args`` (subclass mode) for the model and the data, and the
YAML is read with OmegaConf, so ``${...}`` interpolation works inside a config::

    ttrl fit --config configs/sft/tiny_arith.yaml
    ttrl fit --config configs/rft/tiny_grpo.yaml --config configs/scale/ddp_cpu.yaml --trainer.max_steps=20
    ttrl fit --config configs/rft/tiny_grpo.yaml --print_config

Defaults: a Weights & Biases logger in offline mode (``WANDB_MODE=offline`` unless the environment sets it;
no account or network needed; ``wandb sync`` uploads later) and a Rich progress bar.
"""
from __future__ import annotations

import os
import sys

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar
from lightning.pytorch.cli import LightningCLI

DEFAULT_LOGGER = {
    "class_path": "lightning.pytorch.loggers.WandbLogger",
    "init_args": {"project": "ttrl_lightning", "save_dir": "outputs", "offline": True},
}


class TTRLCLI(LightningCLI):
    """LightningCLI with the project defaults (offline wandb logger, Rich progress bar)."""

    def _instantiate_trainer(self, config: dict, callbacks: list):
        given = list(config.get("callbacks") or []) + list(callbacks)
        wants_bar = config.get("enable_progress_bar", True) is not False
        if wants_bar and not any(isinstance(c, ProgressBar) for c in given):
            callbacks = list(callbacks) + [RichProgressBar()]
        return super()._instantiate_trainer(config, callbacks)


def make_cli(args: list[str] | None, run: bool = True) -> TTRLCLI:
    """Build (and with ``run=True`` run) the CLI; ``args=None`` reads ``sys.argv``."""
    os.environ.setdefault("WANDB_MODE", "offline")
    return TTRLCLI(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_defaults={"logger": DEFAULT_LOGGER},
        parser_kwargs={"parser_mode": "omegaconf"},
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=args,
        run=run,
    )


def main(argv: list[str] | None = None) -> int:
    """``argv`` starts with the subcommand (``fit``, ``validate``, ...)."""
    make_cli(None if argv is None else list(argv))
    return 0


def fit_main(argv: list[str]) -> int:
    return main(["fit", *argv])


def validate_main(argv: list[str]) -> int:
    return main(["validate", *argv])


if __name__ == "__main__":  # pragma: no cover  (used by DDP launches: python -m ttrl_lightning.training_cli fit ...)
    sys.exit(main())

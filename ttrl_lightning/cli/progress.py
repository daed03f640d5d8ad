"""The training progress bar of ``ttrl fit``: Lightning's Rich bar, counting steps when steps bound the run.

A run limited by ``trainer.max_steps`` (``max_epochs`` unset, which Lightning stores as -1) read
``Epoch 0/-2 ... 4/1`` with Lightning's bar: an epoch count with no end and the batches of one epoch.
:class:`StepProgressBar` shows ``Step <global_step>/<max_steps>`` instead, across epochs; runs bounded by
epochs keep Lightning's ``Epoch e/E`` bar. ``global_step`` counts optimizer steps, the unit of ``max_steps``
(a GRPO batch with ``num_iterations=2`` advances it by 2).
"""
from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar

#: the label of the training bar of a step-limited run
STEP_DESCRIPTION = "Step"


def step_limited(trainer: pl.Trainer) -> bool:
    """True when ``max_steps`` bounds the run and no ``max_epochs`` does."""
    return trainer.max_steps is not None and trainer.max_steps > 0 and trainer.max_epochs in (None, -1)


class StepProgressBar(RichProgressBar):
    """``RichProgressBar`` whose training bar counts optimizer steps up to ``max_steps`` in step-limited runs
    (see the module doc)."""

    @property
    def total_train_batches(self) -> int | float:
        if step_limited(self.trainer):
            return self.trainer.max_steps
        return super().total_train_batches

    def _get_train_description(self, current_epoch: int) -> str:
        if not step_limited(self.trainer):
            return super()._get_train_description(current_epoch)
        return f"{STEP_DESCRIPTION:{len(self.validation_description)}}"

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)  # resets the bar to 0 at every epoch
        if step_limited(trainer):
            self._update(self.train_progress_bar_id, trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not step_limited(trainer):
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if not self.is_disabled and self.train_progress_bar_id is None:
            self._initialize_train_progress_bar_id()
        self._update(self.train_progress_bar_id, trainer.global_step)
        self._update_metrics(trainer, pl_module)
        self.refresh()

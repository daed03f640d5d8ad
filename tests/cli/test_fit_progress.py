"""The `ttrl fit` progress bar (ttrl_lightning/cli/progress.py): a step-limited run counts steps up to
max_steps across epochs (it read "Epoch 0/-2 ... 4/1"); an epoch-limited run keeps Lightning's epoch bar."""
import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from ttrl_lightning.cli.progress import StepProgressBar, step_limited


class _Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2)  # 3 batches an epoch


def _fit(**limits) -> StepProgressBar:
    bar = StepProgressBar()
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_model_summary=False, callbacks=[bar], **limits)
    trainer.fit(_Tiny())
    return bar


def test_step_limited_run_counts_steps_across_epochs():
    bar = _fit(max_steps=7)  # 3 epochs of 3 batches, stopped at step 7
    task = bar.progress.tasks[bar.train_progress_bar_id]
    assert task.description.strip() == "Step"
    assert (task.completed, task.total) == (7, 7)


def test_epoch_limited_run_keeps_the_epoch_bar():
    bar = _fit(max_epochs=2)
    task = bar.progress.tasks[bar.train_progress_bar_id]
    assert task.description.strip() == "Epoch 1/1"
    assert (task.completed, task.total) == (3, 3)


@pytest.mark.parametrize("max_steps, max_epochs, expected", [(4, -1, True), (4, None, True), (-1, 3, False),
                                                              (4, 3, False)])
def test_step_limited(max_steps, max_epochs, expected):
    trainer = pl.Trainer(max_steps=max_steps, max_epochs=max_epochs, logger=False, enable_checkpointing=False)
    assert step_limited(trainer) is expected

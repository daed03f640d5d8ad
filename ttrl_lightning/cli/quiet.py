"""Targeted silencers for third-party start-up noise of ``ttrl fit`` / ``ttrl validate``.

A user should see the project's progress and results, and warnings only when they mean something. Each
rule below names one message that carries nothing for a user of this project; everything else (Lightning's
own warnings, deprecations raised by this package, W&B errors) still shows.

* Lightning's advertising "tips" (``💡 Tip: ... litlogger`` / ``... litmodels``), logged at INFO through
  ``lightning.pytorch.utilities.rank_zero``: dropped by a logging filter on that logger only;
* torch's ``FutureWarning`` "`isinstance(treespec, LeafSpec)` is deprecated", raised inside Lightning's own
  pytree helper (not actionable here): one warnings filter on that message and category;
* Lightning's ``ModelCheckpoint`` warning "Using ModelCheckpoint with manual optimization and every_n_train_steps,
  but no pre-optimization state was saved", at every save of a manual-optimization module (GRPO, TTRL) with
  ``every_n_train_steps``: it offers to save the weights from *before* step N beside ``global_step`` N, so a
  ``--resume`` from that checkpoint would lose step N's update. The weights after step N are the consistent
  ones, and the ones saved: one warnings filter on that message;
* W&B's "The anonymous setting has no effect" warning: ``WandbLogger`` always passes ``anonymous=None``,
  which W&B 0.19+ reads as "set"; :func:`drop_unset_wandb_anonymous` removes the unset key before the run
  starts, so the warning has no cause (a user who sets ``anonymous`` still sees it).

The LightningCLI warning about ``args`` and ``sys.argv`` is not silenced:
:func:`ttrl_lightning.cli.fit.make_cli` passes the command line the way LightningCLI expects (see there).
"""
from __future__ import annotations

import logging
import warnings

#: the logger Lightning's ``rank_zero_info`` writes to
LIGHTNING_RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
#: prefix of Lightning's advertising lines
LIGHTNING_TIP_PREFIX = "💡 Tip:"
#: (message regex, category) of third-party warnings that say nothing to a user of this project
IGNORED_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
    (r"Using ModelCheckpoint with manual optimization and every_n_train_steps, but no pre-optimization state",
     UserWarning),
)


class DropLightningTips(logging.Filter):
    """Drops Lightning's "💡 Tip: ..." records (and nothing else)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(LIGHTNING_TIP_PREFIX)


def install() -> None:
    """Install the filters above (idempotent)."""
    log = logging.getLogger(LIGHTNING_RANK_ZERO_LOGGER)
    if not any(isinstance(f, DropLightningTips) for f in log.filters):
        log.addFilter(DropLightningTips())
    for message, category in IGNORED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


def drop_unset_wandb_anonymous(logger) -> None:
    """Remove ``anonymous=None`` from a not yet started ``WandbLogger``'s init arguments (see module doc)."""
    init = getattr(logger, "_wandb_init", None)
    if isinstance(init, dict) and "anonymous" in init and init["anonymous"] is None:
        del init["anonymous"]

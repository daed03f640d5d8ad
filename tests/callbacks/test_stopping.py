"""The label-free stopping rule: the pure decision worked by hand, and the callback deciding as it does."""
from types import SimpleNamespace

import pytest
import torch

from ttrl_lightning.callbacks.stopping import (COMPLETION_LEN, MAJORITY_RATIO, LabelFreeStopping, StoppingRule,
                                               smoothed, stop_decision)


def test_smoothing_and_the_plateau_by_hand():
    assert smoothed([1.0, 0.0, 0.0], 0.5) == [1.0, 0.5, 0.25]
    rule = StoppingRule(smoothing=0.0, patience=3, min_delta=0.01, min_steps=4)
    # rising for 5 steps, then flat: the first step whose last 3 values set no new high by > 0.01
    ratios = [0.40, 0.50, 0.60, 0.70, 0.80, 0.805, 0.80, 0.81, 0.79]
    assert stop_decision({MAJORITY_RATIO: ratios}, rule)[0] == 7  # window 5..7: max 0.81 <= 0.80 + 0.01
    assert stop_decision({MAJORITY_RATIO: ratios[:7]}, rule) is None
    # still rising: never fires
    assert stop_decision({MAJORITY_RATIO: [0.1 * i for i in range(10)]}, rule) is None
    # length collapse fires first, with its reason
    step, reason = stop_decision({MAJORITY_RATIO: [0.1 * i for i in range(10)],
                                  COMPLETION_LEN: [20, 19, 12, 9, 8, 8, 8, 8, 8, 8]}, rule)
    assert step == 3 and "completion length" in reason
    with pytest.raises(ValueError, match="patience"):
        StoppingRule(patience=0)


class _Strategy:
    def reduce(self, value, reduce_op):
        return value


@pytest.mark.parametrize("mode", ["stop", "flag"])
def test_the_callback_decides_as_the_function(mode):
    ratios = [0.40, 0.50, 0.60, 0.70, 0.80, 0.805, 0.80, 0.81, 0.79, 0.80]
    cb = LabelFreeStopping(mode=mode, smoothing=0.0, patience=3, min_steps=4)
    logged = {}
    module = SimpleNamespace(device="cpu", log=lambda k, v, **kw: logged.__setitem__(k, v))
    trainer = SimpleNamespace(callback_metrics={}, strategy=_Strategy(), global_step=0, should_stop=False)
    stopped_at = None
    for step, r in enumerate(ratios):
        trainer.global_step = step + 1
        trainer.callback_metrics = {MAJORITY_RATIO: torch.tensor(r), COMPLETION_LEN: torch.tensor(10.0)}
        cb.on_train_batch_end(trainer, module, None, None, step)
        if trainer.should_stop and stopped_at is None:
            stopped_at = trainer.global_step
    assert cb.flagged["step"] == 8 and logged["stop/flagged_step"] == 8.0
    assert stopped_at == (8 if mode == "stop" else None)
    # its history survives a checkpoint; another rule is refused on resume
    again = LabelFreeStopping(mode=mode, smoothing=0.0, patience=3, min_steps=4)
    again.load_state_dict(cb.state_dict())
    assert again.history == cb.history and again.flagged == cb.flagged
    with pytest.raises(ValueError, match="rule"):
        LabelFreeStopping(patience=5).load_state_dict(cb.state_dict())
    with pytest.raises(RuntimeError, match="majority_ratio"):
        LabelFreeStopping().on_train_batch_end(SimpleNamespace(callback_metrics={}), module, None, None, 0)

"""The label-free stopping rule: the pure decision worked by hand, and the callback deciding as it does."""
from types import SimpleNamespace

import pytest
import torch

from ttrl_lightning.errors import UserError

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
    # length collapse fires first, with its reason: below half at step 3 (smoothing 0), at step 4 = min_steps
    step, reason = stop_decision({MAJORITY_RATIO: [0.1 * i for i in range(10)],
                                  COMPLETION_LEN: [20, 19, 12, 9, 8, 8, 8, 8, 8, 8]}, rule)
    assert step == 4 and "completion length" in reason
    with pytest.raises(ValueError, match="patience"):
        StoppingRule(patience=0)


def test_a_plateau_counts_only_after_a_rise_by_hand():
    """``min_rise``: the start level is the mean of the first ``patience`` raw values, the best before the
    window is taken from step ``patience`` on, and it must stand ``min_rise`` above the start."""
    # a ratio that never rises, after one high first value: the rule without the rise fires on it at step 2 (the
    # first value is the best before every window), with it never
    noisy_flat = [0.8, 0.5, 0.55, 0.5, 0.45, 0.5, 0.55, 0.5, 0.5, 0.5]
    old = StoppingRule(smoothing=0.0, patience=2, min_delta=0.01, min_steps=2, min_rise=None)
    assert stop_decision({MAJORITY_RATIO: noisy_flat}, old)[0] == 2
    rule = StoppingRule(smoothing=0.0, patience=2, min_delta=0.01, min_steps=2, min_rise=0.1)
    assert stop_decision({MAJORITY_RATIO: noisy_flat}, rule) is None
    # rise, then plateau. start (0.5 + 0.5) / 2 = 0.5. t = 4: best of steps 2..2 is 0.5 < 0.6, no test;
    # t = 5: best of 2..3 is 0.6 >= 0.6, window 4..5 max 0.7 > 0.61; t = 6: best of 2..4 is 0.7, window 5..6
    # max 0.7 <= 0.71: fires at 6
    rise = [0.5, 0.5, 0.5, 0.6, 0.7, 0.7, 0.7, 0.7]
    step, reason = stop_decision({MAJORITY_RATIO: rise}, rule)
    assert step == 6 and "after a rise of >= 0.1" in reason
    assert stop_decision({MAJORITY_RATIO: rise[:6]}, rule) is None
    # a larger rise than the ratio makes: never; the window needs a step past the first patience steps before it
    assert stop_decision({MAJORITY_RATIO: rise}, StoppingRule(smoothing=0.0, patience=2, min_delta=0.01,
                                                                min_steps=2, min_rise=0.25)) is None
    assert stop_decision({MAJORITY_RATIO: [0.1, 0.2, 0.9, 0.9, 0.9]}, StoppingRule(
        smoothing=0.0, patience=2, min_delta=0.01, min_steps=1, min_rise=0.1))[0] == 4
    with pytest.raises(ValueError, match="min_rise"):
        StoppingRule(min_rise=1.5)


def test_min_steps_holds_both_signals_until_step_min_steps():
    """``t >= min_steps`` (0-based) under either signal: a flat majority ratio with patience 2 and min_steps 5
    fires at step 5, not 4 (it fired one step early), and a length that collapses at step 1 fires at step 5,
    not 1 (the length rule ignored min_steps)."""
    rule = StoppingRule(smoothing=0.0, patience=2, min_delta=0.01, min_steps=5, min_rise=None)
    flat = [0.5] * 10
    assert stop_decision({MAJORITY_RATIO: flat}, rule)[0] == 5
    assert stop_decision({MAJORITY_RATIO: flat[:5]}, rule) is None  # steps 0-4 only: never
    rising = [0.1 * i for i in range(10)]
    step, reason = stop_decision({MAJORITY_RATIO: rising, COMPLETION_LEN: [20] + [4] * 9}, rule)
    assert step == 5 and "completion length" in reason
    # min_steps below patience: the plateau waits for its window (t >= patience), the length does not
    short = StoppingRule(smoothing=0.0, patience=4, min_delta=0.01, min_steps=1, min_rise=None)
    assert stop_decision({MAJORITY_RATIO: flat}, short)[0] == 4
    assert stop_decision({MAJORITY_RATIO: rising, COMPLETION_LEN: [20, 4] + [4] * 8}, short)[0] == 1


class _Strategy:
    def reduce(self, value, reduce_op):
        return value


@pytest.mark.parametrize("mode", ["stop", "flag"])
def test_the_callback_decides_as_the_function(mode):
    ratios = [0.40, 0.50, 0.60, 0.70, 0.80, 0.805, 0.80, 0.81, 0.79, 0.80]
    cb = LabelFreeStopping(mode=mode, smoothing=0.0, patience=3, min_steps=4)
    logged = {}
    module = SimpleNamespace(device="cpu", log=lambda k, v, **kw: logged.__setitem__(k, v))
    trainer = SimpleNamespace(callback_metrics={}, strategy=_Strategy(), global_step=0, should_stop=False,
                              fit_loop=SimpleNamespace(total_batch_idx=0))
    stopped_at = None
    for step, r in enumerate(ratios):
        # after batch `step`: 2 optimizer steps per batch (num_iterations 2), so global_step is not the step
        trainer.global_step, trainer.fit_loop.total_batch_idx = 2 * (step + 1), step
        trainer.callback_metrics = {MAJORITY_RATIO: torch.tensor(r), COMPLETION_LEN: torch.tensor(10.0)}
        cb.on_train_batch_end(trainer, module, None, None, step)
        if trainer.should_stop and stopped_at is None:
            stopped_at = step
    # the logged step is the 0-based index of the batch that fired, the index stop_decision returns (7)
    assert stop_decision(cb.history, cb.rule)[0] == 7
    assert cb.flagged["step"] == 7 and logged["stop/flagged_step"] == 7.0
    assert stopped_at == (7 if mode == "stop" else None)
    # its history survives a checkpoint; another rule is refused on resume
    again = LabelFreeStopping(mode=mode, smoothing=0.0, patience=3, min_steps=4)
    again.load_state_dict(cb.state_dict())
    assert again.history == cb.history and again.flagged == cb.flagged
    with pytest.raises(UserError, match="rule"):  # one line at `ttrl fit --ckpt_path`, not a traceback
        LabelFreeStopping(patience=5).load_state_dict(cb.state_dict())
    with pytest.raises(UserError, match="majority_ratio"):
        LabelFreeStopping().on_train_batch_end(SimpleNamespace(callback_metrics={}), module, None, None, 0)


def test_lock_in_by_hand():
    """TTRL-Guard's lock-in: the flip rate (logged once questions come round again, NaN before) low while the
    majority ratio is high fires at the first such step t >= min_steps, even with the length kept; the plateau is
    held off here by a ratio that keeps rising."""
    from ttrl_lightning.callbacks.stopping import FLIP_RATE

    rule = StoppingRule(smoothing=0.0, patience=50, min_steps=3, lock_ratio=0.9, lock_flip_rate=0.05)
    ratios = [0.60, 0.70, 0.80, 0.85, 0.91, 0.95, 0.97, 0.99]
    nan = float("nan")
    flips = [nan, nan, 0.30, 0.10, 0.06, 0.04, 0.0, 0.0]
    step, reason = stop_decision({MAJORITY_RATIO: ratios, FLIP_RATE: flips, COMPLETION_LEN: [9.0] * 8}, rule)
    assert step == 5 and "locked in" in reason  # step 4: flips 0.06 > 0.05; step 5: 0.04 with ratio 0.95
    # a high ratio with labels still moving, or labels still with a low ratio: no lock
    assert stop_decision({MAJORITY_RATIO: ratios, FLIP_RATE: [0.2] * 8}, rule) is None
    assert stop_decision({MAJORITY_RATIO: [0.5] * 8, FLIP_RATE: [0.0] * 8},
                         StoppingRule(smoothing=0.0, patience=50, min_steps=3)) is None
    # off with lock_ratio None; smoothing runs over the steps that logged a flip rate only
    assert stop_decision({MAJORITY_RATIO: ratios, FLIP_RATE: flips}, StoppingRule(
        smoothing=0.0, patience=50, min_steps=3, lock_ratio=None)) is None
    from ttrl_lightning.callbacks.stopping import smoothed_present

    assert smoothed_present([nan, 1.0, None, 0.0], 0.5) == [None, 1.0, None, 0.5]
    with pytest.raises(ValueError, match="lock_flip_rate"):
        StoppingRule(lock_flip_rate=1.5)


def test_the_callback_reads_the_flip_rate_of_this_step_only():
    from ttrl_lightning.callbacks.stopping import FLIP_RATE

    cb = LabelFreeStopping(mode="flag", smoothing=0.0, patience=50, min_steps=2)
    module = SimpleNamespace(device="cpu", log=lambda *a, **kw: None, last_step_metrics={})
    trainer = SimpleNamespace(callback_metrics={}, strategy=_Strategy(), should_stop=False,
                              fit_loop=SimpleNamespace(total_batch_idx=0))
    for step, (ratio, flip) in enumerate([(0.95, None), (0.95, None), (0.96, 0.0), (0.97, 0.0)]):
        trainer.fit_loop.total_batch_idx = step
        module.last_step_metrics = {} if flip is None else {FLIP_RATE: torch.tensor(flip)}
        # callback_metrics keeps the last logged flip rate on steps that log none: it must not be read
        trainer.callback_metrics = {MAJORITY_RATIO: torch.tensor(ratio), FLIP_RATE: torch.tensor(0.0)}
        cb.on_train_batch_end(trainer, module, None, None, step)
    assert [f != f for f in cb.history[FLIP_RATE]] == [True, True, False, False]
    assert cb.flagged["step"] == 2 and "locked in" in cb.flagged["reason"]
    # a checkpoint of a rule without the lock signal resumes only under lock_ratio None, its history padded
    old = cb.state_dict()
    old["rule"] = {k: v for k, v in old["rule"].items() if not k.startswith("lock")}
    old["history"] = {k: v for k, v in old["history"].items() if k != FLIP_RATE}
    with pytest.raises(ValueError, match="rule"):
        LabelFreeStopping(mode="flag", smoothing=0.0, patience=50, min_steps=2).load_state_dict(old)
    old["rule"].pop("min_rise")  # nor the rise
    again = LabelFreeStopping(mode="flag", smoothing=0.0, patience=50, min_steps=2, lock_ratio=None, min_rise=None)
    again.load_state_dict(old)
    assert len(again.history[FLIP_RATE]) == 4

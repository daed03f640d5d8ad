"""PID forms of the KL controller (Pixelis appendix 6.1): each discrete rule against a hand-computed sequence,
the state through a checkpoint round trip, and the simulated plants of benchmarks/training/kl_control.py."""
import math
from types import SimpleNamespace

import pytest

from ttrl_lightning.errors import UserError

from benchmarks.training.kl_control import PLANTS, BoundController, simulate, step_metrics
from ttrl_lightning.callbacks.pid import PID_FORMS, PIDController, PIDKLController


def test_registry_lists_every_form():
    assert PID_FORMS.names() == ["fixed", "incremental", "log", "positional", "ziegler"]
    with pytest.raises(UserError, match="form must be one of fixed, incremental, log, positional, ziegler"):
        PIDController(form="velocity")
    with pytest.raises(ValueError, match="integral_start"):
        PIDController(form="log", integral_start="never")


def test_incremental_equals_positional_without_clamps():
    c = PIDController(beta_0=0.1, form="incremental", integral_start="immediate", warmup_steps=2)
    # t=0: s=0.35, e=0.20, e_{-1}=0: 0.1 + 0.3*0.20 + 0.05*0.20 = 0.17 (positional gives the same)
    assert c.update(0.35) == pytest.approx(0.17, abs=1e-12)
    # t=1: e=0.20, P increment 0, I increment 0.01: 0.18
    assert c.update(0.35) == pytest.approx(0.18, abs=1e-12)
    # t=2: s=0.32, e=0.17, D=-0.03, Kd on: 0.18 + 0.3*(-0.03) + 0.05*0.17 + 0.1*(-0.03 - 0) = 0.1765
    assert c.update(0.05) == pytest.approx(0.1765, abs=1e-12)
    assert (c.state.p_term, c.state.i_term, c.state.d_term) == pytest.approx((-0.009, 0.0085, -0.003))
    # t=3: s=0.293, e=0.143, D=-0.027: 0.1765 - 0.0081 + 0.00715 + 0.1*(-0.027 + 0.03) = 0.17585
    assert c.update(0.05) == pytest.approx(0.17585, abs=1e-12)


def test_incremental_holds_the_integral_in_warmup_and_clamps_the_state():
    c = PIDController(beta_0=0.1, form="incremental", integral_start="warmup", warmup_steps=2)
    assert c.update(0.35) == pytest.approx(0.16, abs=1e-12)  # 0.1 + 0.3*0.20, no integral before step 2
    assert c.update(0.35) == pytest.approx(0.16, abs=1e-12)  # P increment 0
    # t=2: engaged: 0.16 - 0.009 + 0.0085 - 0.003 = 0.1565
    assert c.update(0.05) == pytest.approx(0.1565, abs=1e-12)
    # anti-windup: the clamped state is the integral
    c = PIDController(beta_0=0.01, form="incremental", integral_start="immediate", warmup_steps=0)
    assert c.update(0.0) == 1e-3  # 0.01 - 0.045 - 0.0075 < beta_min
    assert c.update(0.0) == 1e-3  # 1e-3 - 0.0075, clamped again (nothing stored below the clamp)
    # t=2: s=0.115, e=-0.035, D=0.115: 1e-3 + 0.3*0.115 - 0.05*0.035 + 0.1*0.115 = 0.04525
    assert c.update(1.15) == pytest.approx(0.04525, abs=1e-12)


def test_log_form_rule():
    c = PIDController(beta_0=0.1, form="log", integral_start="warmup", warmup_steps=2)
    # t=0: s=0.30, e=0.30/0.15-1=1.0: u = ln 0.1 + 0.3*1.0 (no integral, no D in warm-up)
    assert c.update(0.30) == pytest.approx(0.1 * math.exp(0.3), rel=1e-12)
    # t=1: e=1.0 again: no change
    assert c.update(0.30) == pytest.approx(0.1 * math.exp(0.3), rel=1e-12)
    # t=2: s=0.27, e=0.8, D=-0.2: + 0.3*(-0.2) + 0.05*0.8 + 0.1*(-0.2 - 0) = -0.04
    assert c.update(0.0) == pytest.approx(0.1 * math.exp(0.26), rel=1e-12)
    # t=3: s=0.243, e=0.62, D=-0.18: + 0.3*(-0.18) + 0.05*0.62 + 0.1*(-0.18 + 0.2) = -0.021
    assert c.update(0.0) == pytest.approx(0.1 * math.exp(0.239), rel=1e-12)
    # the state clamp at log beta_max
    top = PIDController(beta_0=99.0, form="log", warmup_steps=0)
    assert top.update(1e4) == pytest.approx(100.0, rel=1e-12)


def test_log_form_corridor_start_and_error_clip():
    c = PIDController(beta_0=0.1, form="log", integral_start="corridor", warmup_steps=100)
    # t=0: s=0.05 < 0.10, e=-2/3: P only, u = ln 0.1 - 0.2
    assert c.update(0.05) == pytest.approx(0.1 * math.exp(-0.2), rel=1e-12)
    assert not c.state.integral_engaged
    # t=1: s=0.045+0.065=0.11 reaches the corridor, e=-4/15: + 0.3*(-4/15 + 2/3) + 0.05*(-4/15)
    assert c.update(0.65) == pytest.approx(0.1 * math.exp(-0.2 + 0.12 - 0.2 / 15), rel=1e-12)
    assert c.state.integral_engaged
    clip = PIDController(beta_0=0.1, form="log", integral_start="immediate", error_clip=(-0.2, 0.2))
    # e = 1.0 clipped to 0.2: + 0.3*0.2 + 0.05*0.2
    assert clip.update(0.30) == pytest.approx(0.1 * math.exp(0.07), rel=1e-12)


def test_ziegler_rule_on_the_raw_kl():
    c = PIDController(beta_0=0.1, form="ziegler", horizon=10)
    assert c.update(0.30) == pytest.approx(0.102, abs=1e-12)  # e = clip(1.0) = 0.2: 0.1 * (1 + 0.2/10)
    # raw KL 0.165 -> e = 0.1 (the smoothed 0.2865 would clip at 0.2): 0.102 * 1.01
    assert c.update(0.165) == pytest.approx(0.10302, abs=1e-12)
    assert c.update(0.0) == pytest.approx(0.10302 * 0.98, abs=1e-12)  # e = clip(-1.0) = -0.2
    assert PIDController(beta_0=0.1, form="ziegler").update(0.30) == pytest.approx(0.1 * (1 + 0.2 / 1e4))


def test_fixed_beta_still_reports_the_corridor():
    c = PIDController(beta_0=0.07, form="fixed")
    assert [c.update(k) for k in (0.15, 5.0, 0.0)] == [0.07, 0.07, 0.07]
    assert c.state.kl_smoothed == pytest.approx(0.9 * (0.9 * 0.15 + 0.5))
    assert not c.in_corridor()


@pytest.mark.parametrize("form", sorted(PID_FORMS))
def test_state_round_trip_for_every_form(form):
    a = PIDController(beta_0=0.1, form=form, warmup_steps=2, horizon=10)
    for k in (0.3, 0.2, 0.1):
        a.update(k)
    b = PIDController(beta_0=0.1, form=form, warmup_steps=2, horizon=10)
    b.load_state_dict(a.state_dict())
    assert [a.update(k) for k in (0.25, 0.12, 0.4)] == [b.update(k) for k in (0.25, 0.12, 0.4)]
    assert a.state_dict() == b.state_dict()
    # through the callback's checkpoint hooks, before and after the controller exists
    module = SimpleNamespace(kl_coef=0.1)
    saved = PIDKLController(form=form, warmup_steps=2, horizon=10)
    saved._ensure(module)
    for k in (0.3, 0.2):
        saved.controller.update(k)
    restored = PIDKLController(form=form, warmup_steps=2, horizon=10)
    restored.load_state_dict(saved.state_dict())
    restored._ensure(SimpleNamespace(kl_coef=0.5))  # beta_0 comes from the checkpoint, not the module
    assert restored.controller.update(0.17) == saved.controller.update(0.17)


def test_checkpoint_of_another_form_is_refused_and_old_checkpoints_load():
    log = PIDController(form="log")
    log.update(0.2)
    with pytest.raises(ValueError, match="'log' PID form"):
        PIDController(form="positional").load_state_dict(log.state_dict())
    old = {"step": 3, "kl_smoothed": 0.2, "integral": 0.1, "prev_error": 0.05, "beta": 0.12,
           "p_term": 0.0, "i_term": 0.0, "d_term": 0.0}  # written before the forms existed
    c = PIDController(form="positional")
    c.load_state_dict(old)
    assert c.state.step == 3 and c.state.form == "positional"


# ------------------------------------------------------------ simulated plants (benchmarks/training/kl_control.py)
def test_log_form_meets_the_claims_on_the_matched_plant():
    m = step_metrics(simulate(PLANTS["matched"], PIDController(beta_0=0.04, form="log")))
    assert m["ok"] and m["rise"] < 200 and m["overshoot"] < 0.10
    assert m["final_kl"] == pytest.approx(0.15, abs=1e-3)


def test_velocity_forms_have_the_authority_positional_lacks():
    # needed beta 4.0 = 100 x beta_0: the positional integral saturates at I_max and beta stops at
    # beta_0 + Kp e + Ki I_max = 0.04 + 0.3 * (1.064 - 0.15) + 0.25 = 0.564, KL 1.06 instead of 0.15
    ctl = PIDController(beta_0=0.04, form="positional")
    pos = step_metrics(simulate(PLANTS["up100"], ctl))
    assert ctl.state.integral == 5.0 and pos["final_beta"] == pytest.approx(0.564, abs=1e-3)
    assert pos["final_kl"] > 1.0
    for form in ("incremental", "log"):
        m = step_metrics(simulate(PLANTS["up100"], PIDController(beta_0=0.04, form=form)))
        assert m["final_kl"] == pytest.approx(0.15, abs=2e-3) and m["final_beta"] == pytest.approx(4.0, rel=0.02)


def test_start_up_bound_rules_out_the_claims_where_beta_0_is_far_too_low():
    # holding beta_0 until the smoothed KL reaches target, then beta_max, still overshoots by > 50%:
    # no PI-type controller (Kd = 0 in warm-up) can keep overshoot < 10% on these plants
    for name in ("up10", "up100", "up100_sqrt", "fast_up10"):
        assert step_metrics(simulate(PLANTS[name], BoundController()))["overshoot"] > 0.5

"""PID controller of beta (Pixelis appendix 6.1): a hand-computed step sequence and a simulated plant."""
import pytest

from ttrl_lightning.callbacks.pid import PIDController


def test_matches_hand_computed_sequence():
    c = PIDController(form="positional", beta_0=0.1, target=0.15, kp=0.3, ki=0.05, kd=0.1, warmup_steps=2, smoothing=0.9)
    # t=0: s=0.35, e=0.20, I=0.20, D=0 (first step), Kd=0 (warm-up): beta = 0.1 + 0.06 + 0.01 = 0.17
    assert c.update(0.35) == pytest.approx(0.17, abs=1e-12)
    # t=1: s=0.9*0.35+0.1*0.35=0.35, e=0.20, I=0.40, Kd=0 (warm-up): beta = 0.1 + 0.06 + 0.02 = 0.18
    assert c.update(0.35) == pytest.approx(0.18, abs=1e-12)
    # t=2: s=0.315+0.005=0.32, e=0.17, I=0.57, D=-0.03, Kd=0.1: beta = 0.1 + 0.051 + 0.0285 - 0.003 = 0.1765
    assert c.update(0.05) == pytest.approx(0.1765, abs=1e-12)
    assert (c.state.p_term, c.state.i_term, c.state.d_term) == pytest.approx((0.051, 0.0285, -0.003))
    # t=3: s=0.288+0.005=0.293, e=0.143, I=0.713, D=-0.027: beta = 0.1 + 0.0429 + 0.03565 - 0.0027 = 0.17585
    assert c.update(0.05) == pytest.approx(0.17585, abs=1e-12)
    # KL below target lowers beta: from s=0.05 on, e=-0.1, the P term alone is -0.03
    low = PIDController(form="positional", beta_0=0.1, warmup_steps=0)
    assert low.update(0.05) == pytest.approx(0.1 - 0.03 - 0.005)


def test_clamps_integral_and_beta():
    c = PIDController(form="positional", beta_0=0.1, beta_max=100.0, integral_max=5.0)
    for _ in range(200):
        c.update(0.35)  # e = 0.2 every step
    assert c.state.integral == pytest.approx(5.0)
    assert c.beta == pytest.approx(0.1 + 0.3 * 0.2 + 0.05 * 5.0)
    assert PIDController(form="positional", beta_0=0.1).update(1e4) == 100.0
    c = PIDController(form="positional", beta_0=0.1)
    for _ in range(200):
        c.update(0.0)
    assert c.state.integral == pytest.approx(-5.0)
    assert c.beta == 1e-3
    with pytest.raises(ValueError, match="non-finite"):
        c.update(float("nan"))


def test_state_dict_round_trip():
    a = PIDController(form="positional", beta_0=0.1, warmup_steps=1)
    for k in (0.3, 0.2, 0.1):
        a.update(k)
    b = PIDController(form="positional", beta_0=0.1, warmup_steps=1)
    b.load_state_dict(a.state_dict())
    assert [a.update(0.25), a.update(0.12)] == [b.update(0.25), b.update(0.12)]


def simulate_plant(steps=1500, k_free=0.4, beta_half=0.1, rate=0.05, beta_0=0.1, target=0.15):
    """First-order plant: KL relaxes (rate per step) toward k_free / (1 + beta / beta_half); KL starts at 0."""
    c = PIDController(form="positional", beta_0=beta_0, target=target)
    kl, trace = 0.0, []
    for _ in range(steps):
        beta = c.update(kl)
        kl = kl + rate * (k_free / (1 + beta / beta_half) - kl)
        trace.append(kl)
    rise = next(i for i, k in enumerate(trace) if k >= 0.9 * target)
    overshoot = (max(trace) - target) / target
    settle = next(i for i in range(steps) if all(0.10 <= k <= 0.20 for k in trace[i:]))
    return trace, rise, overshoot, settle, c


@pytest.mark.parametrize("k_free,beta_half,beta_0", [(0.4, 0.1, 0.1), (0.6, 0.1, 0.1), (0.4, 0.02, 0.05)])
def test_settles_in_corridor_on_simulated_plant(k_free, beta_half, beta_0):
    trace, rise, overshoot, settle, c = simulate_plant(k_free=k_free, beta_half=beta_half, beta_0=beta_0)
    print(f"\nplant k_free={k_free} beta_half={beta_half} beta_0={beta_0}: rise time {rise} steps "
          f"(to 90% of target), overshoot {overshoot:.1%} of target, in corridor from step {settle}, "
          f"final KL {trace[-1]:.4f}, beta {c.beta:.4f}")
    assert all(0.10 <= k <= 0.20 for k in trace[-300:])
    assert trace[-1] == pytest.approx(0.15, abs=1e-3)  # integral action removes the steady-state error
    assert rise < 200
    # the KL the plant would reach at beta_0 without control is off target; the controller must have moved beta
    open_loop = k_free / (1 + beta_0 / beta_half)
    assert abs(open_loop - 0.15) > 0.02 and abs(c.beta - beta_0) > 1e-3


@pytest.mark.parametrize("max_steps, warmup, warns", [(3, 100, True), (3, 3, True), (3, 2, False), (-1, 100, False)])
def test_a_run_inside_its_warm_up_is_warned_about(max_steps, warmup, warns):
    """Kd (and, by default, Ki) are held at 0 in warm-up: a run that ends inside it is proportional-only, and
    the callback says so when it starts (issue 21, D13)."""
    from types import SimpleNamespace
    from unittest import mock

    from ttrl_lightning.callbacks import PIDKLController

    cb = PIDKLController(warmup_steps=warmup)
    module = SimpleNamespace(kl_coef=0.1, kl_observation=None)
    with mock.patch("ttrl_lightning.callbacks.pid.rank_zero_warn") as warn:
        cb.on_fit_start(SimpleNamespace(max_steps=max_steps), module)
    assert warn.called == warns
    if warns:
        assert f"end inside the {warmup}-step warm-up" in warn.call_args[0][0]
    assert module.kl_coef == 0.1


def test_the_callback_holds_beta_on_a_step_that_observes_no_kl():
    """``kl_observation_tokens`` 0 (every group of the step abstained): no update of the controller; a step
    with tokens updates it; a module that does not count its tokens is always observed."""
    from types import SimpleNamespace

    import torch

    from ttrl_lightning.callbacks import PIDKLController

    strategy = SimpleNamespace(reduce=lambda value, reduce_op: value)
    trainer = SimpleNamespace(strategy=strategy)
    logged = {}
    module = SimpleNamespace(kl_coef=0.1, kl_observation=torch.tensor(0.0),
                             kl_observation_tokens=torch.tensor(0.0), device="cpu",
                             log_dict=lambda d, **kw: logged.update(d))
    cb = PIDKLController(warmup_steps=0)
    cb.on_train_batch_end(trainer, module, None, None, 0)
    assert module.kl_coef == 0.1 and cb.controller.state.step == 0 and cb.last_reduced_kl is None
    assert logged == {"pid/beta": 0.1}
    module.kl_observation, module.kl_observation_tokens = torch.tensor(0.4), torch.tensor(6.0)
    cb.on_train_batch_end(trainer, module, None, None, 1)
    assert cb.controller.state.step == 1 and cb.last_reduced_kl == pytest.approx(0.4) and module.kl_coef > 0.1
    bare = SimpleNamespace(kl_coef=0.1, kl_observation=torch.tensor(0.0), device="cpu",
                           log_dict=lambda d, **kw: None)
    other = PIDKLController(warmup_steps=0)
    other.on_train_batch_end(trainer, bare, None, None, 0)
    assert other.controller.state.step == 1 and other.last_reduced_kl == 0.0

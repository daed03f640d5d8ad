"""Guard settings that can never act are refused when the run is configured, in one line: ``min_share`` above
``max_share`` (a question that passes the consensus gate is locked: none is ever labelled), a ``min_margin`` the
lock leaves no room for, and ``advantage.negative_shift`` without a consensus gate to fail (RESTRAIN's negative
branch trains only the questions that fail it). A share of 400 digits is one line too (``Bounds`` converted it
to a float: ``OverflowError``)."""
import pytest

from ttrl_lightning.errors import Bounds, UserError, check_bounds, shown
from ttrl_lightning.modules.ttrl.specs import AdvantageSpec, VotingSpec
from ttrl_lightning.pseudo_labels import pseudo_label

from .test_module import _module  # noqa: F401  (the scripted engine of the TTRL tests)

HUGE = 10**400


@pytest.mark.parametrize("options, message", [
    ({"min_share": 0.9, "max_share": 0.5}, r"min_share 0\.9 is above max_share 0\.5: .* none is ever labelled"),
    ({"min_share": 1, "max_share": 0}, r"min_share 1 is above max_share 0"),
    ({"min_margin": 0.5, "max_share": 0.5}, r"min_margin 0\.5 is not below max_share 0\.5"),
    ({"min_margin": 0.6, "max_share": 0.4, "min_share": 0.1}, r"min_margin 0\.6 is not below max_share 0\.4"),
    ({"min_margin": 1.0}, r"min_margin 1: no lead over the runner-up exceeds it"),
    ({"min_share": HUGE}, r"min_share must be a share in \[0, 1\] or null, got an integer of about 401 digits"),
    ({"max_share": -HUGE}, r"max_share must be a share in \[0, 1\] or null, got a negative integer of about 401 digits"),
    ({"min_margin": 10**5000}, r"min_margin must be a share .* got an integer of about 5,00\d digits"),
])
def test_guards_that_can_never_label_are_one_line(options, message):
    with pytest.raises(UserError, match=rf"voting\.options: majority: {message}") as err:
        VotingSpec(options=options)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


@pytest.mark.parametrize("options", [{"min_share": 0.5, "max_share": 0.5}, {"min_share": 0.5, "max_share": 0.8},
                                     {"min_share": 0.5, "min_margin": 0.15, "max_share": 0.9}, {"max_share": 0.0},
                                     {"min_margin": 0.99}])
def test_guards_that_can_act_are_taken(options):
    VotingSpec(options=options)


def test_one_call_of_the_labeler_still_applies_the_guards_in_order():
    """The check is the run's configuration: the labeler itself, called once, gates first and locks after."""
    votes = [{"answer": a} for a in ("5", "5", "5", "5", "6")]
    assert pseudo_label("majority", votes, min_share=0.9, max_share=0.5).negative


@pytest.mark.parametrize("voting", [
    {"labeler": "majority"},                                   # no guard at all
    {"labeler": "majority", "options": {"max_share": 0.8}},    # a lock is not a gate
    {"labeler": "majority", "options": {"min_share": 0.0}},    # a gate every question passes
    {"labeler": "soft_majority"},                              # no gate in the labeler
])
def test_a_negative_shift_without_a_gate_is_one_line(voting):
    with pytest.raises(UserError, match=r"advantage\.negative_shift 0\.25 trains the questions that fail "
                                        r"majority's consensus gate .* it could never act") as err:
        _module({}, voting, advantage=AdvantageSpec(negative_shift=0.25))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("options", [{"min_share": 0.5}, {"min_margin": 0.0}, {"min_share": 0.5, "min_margin": 0.15}])
def test_a_negative_shift_with_a_gate_is_taken(options):
    _module({}, {"labeler": "majority", "options": options}, advantage=AdvantageSpec(negative_shift=0.25))


def test_ttrl_fit_refuses_a_negative_shift_without_a_gate_in_one_line(capsys, tmp_path, monkeypatch):
    from ttrl_lightning.cli import main
    from ttrl_lightning.cli.configs import config_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    rc = main(["fit", "--config", config_path("ttrl/tiny_demo.yaml"), "--trainer.logger=false",
               "--model.init_args.advantage.negative_shift=0.25", "--model.init_args.voting.labeler=majority"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "advantage.negative_shift 0.25" in err[0], err
    for options, needle in ((f"{{min_share: {HUGE}}}", "min_share must be a share in [0, 1] or null, got an integer"),
                            ("{min_share: 0.9, max_share: 0.5}", "min_share 0.9 is above max_share 0.5")):
        rc = main(["fit", "--config", config_path("ttrl/tiny_demo.yaml"), "--trainer.logger=false",
                   "--model.init_args.voting.labeler=majority", f"--model.init_args.voting.options={options}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and needle in err[0] and "Overflow" not in err[0], err


@pytest.mark.parametrize("value, bounds, inside", [
    (HUGE, Bounds(low=0, high=1), False), (-HUGE, Bounds(low=0), False), (HUGE, Bounds(low=1, integer=True), True),
    (HUGE, Bounds(high=HUGE), True), (10**5000, Bounds(low=0, high=1, optional=True), False),
    (float("nan"), Bounds(), False), (float("inf"), Bounds(low=0), False), (2.5, Bounds(integer=True), False),
    (True, Bounds(), False), (3, Bounds(low=0, high=3, high_open=True), False),
], ids=lambda v: "huge" if isinstance(v, int) and abs(v) > 10**20 else None)
def test_bounds_membership_never_raises(value, bounds, inside):
    assert (value in bounds) is inside


def test_a_huge_value_is_named_by_its_size():
    with pytest.raises(UserError, match=r"^x\.k must be in \[0, 1\], got an integer of about 5,00\d digits$"):
        check_bounds({"k": 10**5000}, {"k": Bounds(low=0, high=1)}, "x.")
    assert shown(0.5) == "0.5" and shown("a" * 200).endswith("...") and len(shown([10**5000])) < 80

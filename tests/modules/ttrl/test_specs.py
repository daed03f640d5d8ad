"""TTRL's grouped options check themselves when built: each bad value is one ``UserError`` naming its field."""
import pytest

from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.ttrl.specs import AdvantageSpec, EvalSpec, VotingSpec


@pytest.mark.parametrize("options, message", [
    ({"labeler": "nope"}, r"voting\.labeler must be one of .*majority"),
    ({"num_votes": 4, "num_trained": 5}, r"voting\.num_trained \(N=5, the rows trained on\) must be <="),
    ({"labeler": "self_harmony"}, r"voting\.fused_prompt_template must be a string holding '\{prompt\}'"),
    ({"answer_extractor": "nope"}, r"voting\.answer_extractor must be one of"),
    ({"warmup_majority_steps": 3}, r"voting\.warmup_majority_steps is an option of self_harmony"),
    ({"options": [1]}, r"voting\.options must be a mapping of majority's options"),
    ({"options": {"nope": 1}}, r"voting\.options: majority has no option 'nope'"),
    ({"num_votes": 0}, r"voting\.num_votes"),
    # values out of range are refused here too, before a model loads (the labeler's own check, called early)
    ({"options": {"max_share": 1.5}}, r"voting\.options: majority: max_share must be a share in \[0, 1\]"),
    ({"options": {"min_share": "0.5"}}, r"voting\.options: majority: min_share must be a share"),
    ({"labeler": "pixel", "options": {"target_coverage": 0}},
     r"voting\.options: pixel: target_coverage must be a number in \(0, 1\]"),
    ({"labeler": "pixel", "options": {"alpha": 1.0}}, r"voting\.options: pixel: alpha must be a number in \(0, 1\)"),
    ({"labeler": "pixel", "options": {"alpha": 0.1, "target_coverage": 0.9}},
     r"voting\.options: pixel: calibration takes alpha or target_coverage .*not both"),
])
def test_voting_refuses_each_bad_value_naming_its_field(options, message):
    with pytest.raises(UserError, match=message):
        VotingSpec(**options)


def test_voting_accepts_a_fused_labeler_with_its_template_and_a_guard_option():
    spec = VotingSpec(labeler="self_harmony", fused_prompt_template="{prompt} reframe:", warmup_majority_steps=2)
    assert spec.num_trained <= spec.num_votes
    VotingSpec(options={"min_share": 0.5, "min_margin": 0.15})  # SCRL's gate on majority
    VotingSpec(labeler="pixel", options={"target_coverage": 0.9, "delta": 0.2})  # pixel at the paper's coverage


@pytest.mark.parametrize("spec, options, message", [
    (EvalSpec, {"k": 0}, r"eval\.k"),
    (EvalSpec, {"top_p": 0.0}, r"eval\.top_p"),
    (AdvantageSpec, {"rule": "nope"}, r"advantage\.rule must be one of group, ema_baseline, fixed"),
    (AdvantageSpec, {"baseline_momentum": 1.0}, r"advantage\.baseline_momentum"),
    (AdvantageSpec, {"negative_shift": -0.1}, r"advantage\.negative_shift"),
])
def test_eval_and_advantage_refuse_values_out_of_range(spec, options, message):
    with pytest.raises(UserError, match=message):
        spec(**options)

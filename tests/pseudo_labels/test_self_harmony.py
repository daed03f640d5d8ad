import math

import pytest

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.consensus import harmonic_mean_select
from ttrl_lightning.pseudo_labels import (PseudoLabelError, fused_template, js_consistency_penalty, pseudo_label,
                                          sharpness_penalty)

FULL = fused_template("reorder the operands", "What is 1 + 2?", r"1 + 2 = \boxed{{{}}}")


def fused(answer, strategy="reorder the operands"):
    return {"view": "reframed", "text": fused_template(strategy, "What is 1 + 2?", rf"so \boxed{{{answer}}}")}


def orig(answer):
    return {"view": "original", "answer": answer}


def two_views(original, reframed):
    return [orig(a) for a in original] + [fused(a) for a in reframed]


def test_hms_recovers_a_view_stable_minority_that_majority_misses():
    # 7 is frequent in the original view only (fragile); 9 is held by both views.
    rollouts = two_views(["7", "7", "7", "7", "7", "9", "9"], ["9", "9", "9", "5", "4", "3", "7"])
    assert pseudo_label("majority", rollouts).label == "7"  # 6 votes against 5
    out = pseudo_label("self_harmony", rollouts, penalty="none")
    assert out.label == "9" and not out.abstain
    # HM(a) = 2 n0 n1 / (n0 N1 + n1 N0), N0 = N1 = 7
    assert out.info["hms"]["7"] == pytest.approx(2 * 5 * 1 / (5 * 7 + 1 * 7))
    assert out.info["hms"]["9"] == pytest.approx(2 * 2 * 3 / (2 * 7 + 3 * 7))
    assert out.rewards == [0, 0, 0, 0, 0, 1, 1] + [1, 1, 1, 0, 0, 0, 0]


def test_warmup_majority_uses_the_majority_label():
    rollouts = two_views(["7", "7", "7", "7", "7", "9", "9"], ["9", "9", "9", "5", "4", "3", "7"])
    out = pseudo_label("self_harmony", rollouts, warmup_majority=True, penalty="none")
    assert out.label == "7" and out.info["warmup"] is True
    assert out.rewards == [1, 1, 1, 1, 1, 0, 0] + [0, 0, 0, 0, 0, 0, 1]


# Hand-worked group for the gated fused reward: original [3, 3, 4], reframed [3, 3, 5]; y* = 3.
# JS: p0 = {3: 2/3, 4: 1/3}, p1 = {3: 2/3, 5: 1/3}, m = {3: 2/3, 4: 1/6, 5: 1/6};
# KL(p0||m) = KL(p1||m) = (1/3) ln 2, so JS / ln 2 = 1/3 and the consistency penalty is 2/3.
# Format: reframed[0] has all three sections (score 1), reframed[1] a placeholder strategy (score 2/3).
def gated_group():
    return [orig("3"), orig("3"), orig("4"), fused("3"), fused("3", strategy="[strategy name]"), fused("5")]


@pytest.mark.parametrize("penalty,kw,div", [
    ("js", {}, 2 / 3),
    ("sharpness", {}, 1.0),  # (2 - 4)^2 / (3^2 / 4) = 16/9, clipped to 1
    ("sharpness", {"sharpness_target": 1}, 4 / 9),  # (2 - 1)^2 / (9 / 4)
    ("sharpness", {"sharpness_target": 2}, 0.0),
    ("none", {}, 0.0),
])
def test_fused_gated_reward_worked_by_hand(penalty, kw, div):
    out = pseudo_label("self_harmony", gated_group(), penalty=penalty, **kw)
    assert out.label == "3"
    assert out.info["div_penalty"] == pytest.approx(div)
    assert out.info["format_scores"] == pytest.approx([1.0, 2 / 3, 1.0])
    gate = 1 - 0.2 * div
    expected = [1, 1, 0, (1 - 0.3 * 0) * gate, (1 - 0.3 * (1 / 3)) * gate, 0]
    assert out.rewards == pytest.approx(expected)


def test_js_case_worked_by_hand_in_numbers():
    out = pseudo_label("self_harmony", gated_group())  # defaults: js, w_f 0.3, w_d 0.2
    assert out.rewards[3] == pytest.approx(13 / 15)  # (1 - 0.2 * 2/3)
    assert out.rewards[4] == pytest.approx(0.78)  # 0.9 * 13/15


def test_weights_change_the_gate():
    out = pseudo_label("self_harmony", gated_group(), w_f=1.0, w_d=0.0)
    assert out.rewards[3:] == pytest.approx([1.0, 2 / 3, 0.0])


def test_js_penalty_special_cases():
    assert js_consistency_penalty(["3", "3"], ["3"]) == 0.0  # one distinct answer
    assert js_consistency_penalty([NO_ANSWER], ["3", "4"]) == 0.0  # a view with no answer
    assert js_consistency_penalty(["3", "4"], ["4", "3"]) == pytest.approx(1.0)  # identical distributions
    assert js_consistency_penalty(["3", "3"], ["4", "4"]) == pytest.approx(0.0)  # disjoint: JS = ln 2
    # unextractable answers are dropped before the distributions are formed
    assert js_consistency_penalty(["3", "4", NO_ANSWER], ["4", "3"]) == pytest.approx(1.0)


def test_sharpness_penalty_counts_reframed_matches():
    assert sharpness_penalty(["1"], ["3"] * 4 + ["5"] * 4, label="3") == 0.0  # 4 hits, target 4
    assert sharpness_penalty(["1"], ["3"] * 8, label="3") == pytest.approx(16 / 16)
    assert sharpness_penalty(["1"], ["3"] * 6 + ["5"] * 2, label="3") == pytest.approx(4 / 16)


def test_hms_denominator_readings_choose_differently():
    # original: 5, 5, 6 and three unextractable (N0 = 6, 3 extractable); reframed: 6, 6, 6, 5 (N1 = 4)
    original = ["5", "5", "6", None, None, None]
    rollouts = [orig(a) if a else {"view": "original", "text": "?"} for a in original]
    rollouts += [orig(a) | {"view": "reframed"} for a in ["6", "6", "6", "5"]]
    default = pseudo_label("self_harmony", rollouts, w_f=0.0, penalty="none")
    assert default.label == "5"  # 4/14 > 6/22
    assert default.info["hms"] == pytest.approx({"5": 4 / 14, "6": 6 / 22})
    other = pseudo_label("self_harmony", rollouts, w_f=0.0, penalty="none", unextractable_in_denominator=False)
    assert other.label == "6"  # 6/13 > 4/11
    assert other.info["hms"] == pytest.approx({"5": 4 / 11, "6": 6 / 13})


def test_hms_option_in_consensus_directly():
    d = harmonic_mean_select(["5", NO_ANSWER], ["5", "6"], unextractable_in_denominator=False)
    assert d.support == {"5": pytest.approx(2 * 1 * 1 / (1 * 2 + 1 * 1))}
    assert harmonic_mean_select(["5", NO_ANSWER], ["5", "6"]).support == {"5": pytest.approx(0.5)}


def test_no_common_answer_abstains_and_laplace_labels():
    rollouts = [orig("5"), fused("6")]
    out = pseudo_label("self_harmony", rollouts)
    assert out.abstain and out.label is None and out.rewards == [0.0, 0.0]
    # laplace: both answers get HM 2*2*1 / (2*2 + 1*2) = 2/3; equal totals; the original view's comes first
    out = pseudo_label("self_harmony", rollouts, laplace=True, penalty="none")
    assert out.label == "5" and out.info["hms"] == pytest.approx({"5": 2 / 3, "6": 2 / 3})
    assert out.rewards == [1.0, 0.0]


def test_tie_goes_to_higher_total_then_original_first():
    # 3: n0=1, n1=1 -> 2/(2+2) = 1/2 ... 4: n0=1, n1=1 -> 1/2; same totals, 3 seen first in the original view
    out = pseudo_label("self_harmony", two_views(["4", "3"], ["3", "4"]), penalty="none")
    assert out.label == "4"


def test_all_unextractable_abstains():
    rollouts = [{"view": "original", "text": "?"}, {"view": "reframed", "text": "SOLUTION: no idea"}]
    out = pseudo_label("self_harmony", rollouts)
    assert out.abstain and out.rewards == [0.0, 0.0]
    assert pseudo_label("self_harmony", rollouts, warmup_majority=True).abstain


def test_one_rollout_per_view():
    out = pseudo_label("self_harmony", [orig("5"), fused("5")])
    assert out.label == "5" and out.info["div_penalty"] == 0.0  # one distinct answer
    assert out.rewards == [1.0, 1.0]


def test_rewards_follow_the_given_order_with_interleaved_views():
    rollouts = [fused("3"), orig("3"), fused("4", strategy=""), orig("4"), orig("3")]
    out = pseudo_label("self_harmony", rollouts, penalty="none")
    assert out.label == "3"
    assert out.rewards == [1.0, 1.0, 0.0, 0.0, 1.0]


def test_format_scores_given_and_missing_text():
    rollouts = [orig("3"), {"view": "reframed", "answer": "3"}]
    with pytest.raises(PseudoLabelError, match=r"rollouts\[1\]\.text is missing"):
        pseudo_label("self_harmony", rollouts)
    out = pseudo_label("self_harmony", rollouts, format_scores=[0.5], penalty="none")
    assert out.rewards == pytest.approx([1.0, 0.85])
    assert pseudo_label("self_harmony", rollouts, w_f=0.0).rewards == [1.0, 1.0]
    with pytest.raises(PseudoLabelError, match=r"format_scores\[0\] must be a number in \[0, 1\], got True"):
        pseudo_label("self_harmony", rollouts, format_scores=[True])
    with pytest.raises(PseudoLabelError, match="format_scores has 2 entries"):
        pseudo_label("self_harmony", rollouts, format_scores=[1.0, 1.0])


def test_bad_options_and_one_view_are_errors():
    with pytest.raises(PseudoLabelError, match="no rollout of view 'reframed'"):
        pseudo_label("self_harmony", [orig("3"), orig("3")])
    with pytest.raises(PseudoLabelError, match="no rollout of view 'original'"):
        pseudo_label("self_harmony", [fused("3")])
    with pytest.raises(PseudoLabelError, match="w_d must be"):
        pseudo_label("self_harmony", gated_group(), w_d=1.5)
    with pytest.raises(KeyError, match="known: js, none, sharpness"):
        pseudo_label("self_harmony", gated_group(), penalty="kl")


def test_nan_signal_is_a_clear_error():
    rollouts = gated_group()
    rollouts[4]["self_certainty"] = [0.1, math.nan]
    with pytest.raises(PseudoLabelError, match=r"self_harmony: rollouts\[4\]\.self_certainty holds NaN at token 1"):
        pseudo_label("self_harmony", rollouts)

"""Pixel TTRL's uncertainty-weighted vote (Pixelis sec. 3.3, ``pseudo_labels.pixel.labeler``): the weights,
abstention, errors and the conformal calibration, worked by hand."""
import math

import pytest

from ttrl_lightning.consensus import conformal_threshold
from ttrl_lightning.pseudo_labels import PseudoLabelError, calibrate_pixel, fit_temperature, pseudo_label

from tests.pseudo_labels.pixel._votes import ro, temperature_scaled


# ------------------------------------------------------------------------------------- the weights w_j

def test_weight_formula_worked_by_hand_on_three_rollouts():
    rollouts = [
        ro("5", entropy=[0.2, 0.4], logprob=[-0.1, -0.3]),           # H = 0.3, p = e^-0.2
        ro("6", entropy=[5.0, 0.1], logprob=[-4.0, -0.05]),          # decisive: token 1 only
        ro("5", entropy=[1.0, 1.0, 0.4], logprob=[-0.5, -0.5, -0.2]),  # H = 0.8, p = e^-0.4
    ]
    masks = [None, [False, True], [True, True, True]]
    vis, rel, t = [0.9, 0.5, 1.0], [1.2, 0.6, 1.2], 2.0
    out = pseudo_label("pixel", rollouts, decisive_masks=masks, visual_fidelity=vis, reliability=rel,
                       temperature=t, delta=0.0)
    h = [0.3, 0.1, 0.8]
    p = [math.exp(-0.2), math.exp(-0.05), math.exp(-0.4)]
    cal = [temperature_scaled(x, t) for x in p]
    w = [math.exp(-h[j]) * cal[j] * vis[j] * rel[j] for j in range(3)]
    assert out.info["entropy"] == pytest.approx(h, rel=1e-12)
    assert out.info["calibration"] == pytest.approx(cal, rel=1e-12)
    assert out.info["weights"] == pytest.approx(w, rel=1e-12)
    assert out.info["support"] == pytest.approx({"5": w[0] + w[2], "6": w[1]}, rel=1e-12)
    total = sum(w)
    assert out.info["margin"] == pytest.approx((w[0] + w[2] - w[1]) / total, rel=1e-12)
    assert out.info["confidence"] == pytest.approx((w[0] + w[2]) / total, rel=1e-12)
    assert out.info["visual_fidelity"] == vis and out.info["reliability"] == rel
    assert out.label == "5" and out.rewards == [1.0, 0.0, 1.0] and not out.abstain


def test_defaults_are_neutral_and_temperature_one_is_the_raw_geometric_mean_probability():
    out = pseudo_label("pixel", [ro("5", entropy=[0.5], logprob=[-0.7])])
    assert out.info["visual_fidelity"] == "neutral" and out.info["reliability"] == [1.0]
    assert out.info["calibration"] == pytest.approx([math.exp(-0.7)], rel=1e-12)
    assert out.info["weights"] == pytest.approx([math.exp(-0.5) * math.exp(-0.7)], rel=1e-12)


def test_confidence_is_clamped_before_the_logit():
    out = pseudo_label("pixel", [ro("5", entropy=[0.0], logprob=[0.0])], temperature=0.5)
    p = 1 - 1e-6
    assert out.info["calibration"] == pytest.approx([temperature_scaled(p, 0.5)], rel=1e-9)


def test_low_entropy_minority_beats_the_hard_majority():
    # "5": H = 2, p = e^-1 -> w = e^-3 = 0.0498 each, 0.149 in all
    # "6": H = 0.05, p = e^-0.01 -> w = e^-0.06 = 0.94 each
    rollouts = [ro("5", [2.0], [-1.0]) for _ in range(3)] + [ro("6", [0.05], [-0.01]) for _ in range(2)]
    assert pseudo_label("majority", rollouts).label == "5"
    out = pseudo_label("pixel", rollouts)
    assert out.label == "6" and out.rewards == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert out.info["support"] == pytest.approx({"5": 3 * math.exp(-3.0), "6": 2 * math.exp(-0.06)})


def test_rewards_follow_answer_equivalence():
    out = pseudo_label("pixel", [ro("0.5"), ro(r"\frac{1}{2}"), ro("3")])
    assert out.label == "0.5" and out.rewards == [1.0, 1.0, 0.0]


# ------------------------------------------------------------------------------------------ abstention

@pytest.mark.parametrize("answers", [("5", "6"), ("6", "5", "5", "6")])
@pytest.mark.parametrize("delta", [0.0, 0.1])
def test_a_tie_always_abstains(answers, delta):
    out = pseudo_label("pixel", [ro(a) for a in answers], delta=delta)
    assert out.abstain and out.label is None and out.rewards == [0.0] * len(answers)
    assert out.info["margin"] == 0.0 and "tie" in out.info["abstain_reason"]


def test_all_unextractable_abstains():
    rollouts = [{"text": "I cannot tell.", "entropy": [0.1], "logprob": [-0.1]} for _ in range(3)]
    out = pseudo_label("pixel", rollouts)
    assert out.abstain and out.label is None and out.rewards == [0.0, 0.0, 0.0]
    assert "unextractable" in out.info["abstain_reason"]


def test_unextractable_heavier_than_any_answer_abstains():
    rollouts = [{"text": "hmm", "entropy": [0.0], "logprob": [-0.01]}, ro("5", [3.0]), ro("6", [3.0])]
    out = pseudo_label("pixel", rollouts, delta=0.0)
    assert out.abstain and "unextractable" in out.info["abstain_reason"]


def test_one_rollout():
    out = pseudo_label("pixel", [ro("4", [0.3, 0.2], [-0.1, -0.2])])
    assert out.label == "4" and out.rewards == [1.0] and not out.abstain
    assert out.info["margin"] == 1.0 and out.info["confidence"] == 1.0


def test_margin_abstention_at_the_threshold():
    # four equal weights 0.5 (H = 0, Cal = 0.5): supports 1.5 and 0.5, margin (1.5 - 0.5) / 2 = 0.5 exactly
    rollouts = [ro("5"), ro("5"), ro("6"), ro("5")]
    at = pseudo_label("pixel", rollouts, delta=0.5)
    assert at.info["weights"] == [0.5] * 4 and at.info["margin"] == 0.5
    assert not at.abstain and at.label == "5" and at.rewards == [1.0, 1.0, 0.0, 1.0]
    above = pseudo_label("pixel", rollouts, delta=math.nextafter(0.5, 1.0))
    assert above.abstain and above.label is None and above.rewards == [0.0] * 4
    assert "margin 0.5 < delta" in above.info["abstain_reason"]


def test_low_entropy_majority_gate_in_nats():
    """The paper's "low-entropy majority (< 0.2)" gate, read as the entropy in nats of the unweighted votes:
    7 of 8 votes give -(7/8 ln 7/8 + 1/8 ln 1/8) = 0.3768 nats (abstains under 0.2, passes under 0.4);
    8 of 8 give 0; off by default."""
    split = [ro("5")] * 7 + [ro("6")]
    h = -(7 / 8 * math.log(7 / 8) + 1 / 8 * math.log(1 / 8))
    off = pseudo_label("pixel", split, duplicate_threshold=None)
    assert not off.abstain and off.info["vote_entropy"] == pytest.approx(h, abs=1e-12)
    gated = pseudo_label("pixel", split, duplicate_threshold=None, majority_entropy_max=0.2)
    assert gated.abstain and gated.rewards == [0.0] * 8
    assert f"vote entropy {h:.4g} nats >= majority_entropy_max=0.2" in gated.info["abstain_reason"]
    assert not pseudo_label("pixel", split, duplicate_threshold=None, majority_entropy_max=0.4).abstain
    unanimous = pseudo_label("pixel", [ro("5")] * 8, duplicate_threshold=None, majority_entropy_max=0.2)
    assert not unanimous.abstain and unanimous.info["vote_entropy"] == 0.0
    with pytest.raises(PseudoLabelError, match="majority_entropy_max must be a number >= 0"):
        pseudo_label("pixel", split, majority_entropy_max=-1)


def test_conformal_non_singleton_abstains():
    rollouts = [ro("5"), ro("5"), ro("6")]  # normalised supports 2/3, 1/3: nonconformity 1/3, 2/3
    wide = pseudo_label("pixel", rollouts, conformal_qhat=0.7)
    assert wide.info["prediction_set"] == ["5", "6"]
    assert wide.abstain and wide.label is None and "conformal set holds 2" in wide.info["abstain_reason"]
    narrow = pseudo_label("pixel", rollouts, conformal_qhat=0.5)
    assert narrow.info["prediction_set"] == ["5"] and not narrow.abstain and narrow.label == "5"
    empty = pseudo_label("pixel", rollouts, conformal_qhat=0.2)
    assert empty.info["prediction_set"] == [] and empty.abstain
    assert "prediction_set" not in pseudo_label("pixel", rollouts).info
    # qhat >= 1 (a dev-cal split where the gold often got no vote): every voted answer is in the set, so only
    # unanimous votes label
    assert pseudo_label("pixel", rollouts, conformal_qhat=1.0).abstain
    unanimous = pseudo_label("pixel", [ro("5")] * 3, conformal_qhat=1.0, duplicate_threshold=None)
    assert unanimous.info["prediction_set"] == ["5"] and not unanimous.abstain and unanimous.label == "5"


def test_zero_weights_abstain():
    out = pseudo_label("pixel", [ro("5"), ro("6")], visual_fidelity=[0.0, 0.0])
    assert out.abstain and out.info["abstain_reason"] == "every rollout has weight 0"
    assert out.info["confidence"] == 0.0

# ---------------------------------------------------------------------------------------------- errors

def test_nan_and_missing_signals_are_named():
    bad = [ro("5"), ro("6", entropy=[0.1, float("nan")], logprob=[-0.1, -0.1])]
    with pytest.raises(PseudoLabelError, match=r"pixel: rollouts\[1\]\.entropy holds NaN at token 1"):
        pseudo_label("pixel", bad)
    bad = [ro("5"), ro("6", logprob=[float("nan")])]
    with pytest.raises(PseudoLabelError, match=r"rollouts\[1\]\.logprob holds NaN"):
        pseudo_label("pixel", bad)
    missing = [ro("5"), {"answer": "6", "entropy": [0.1]}]
    with pytest.raises(PseudoLabelError, match=r"pixel: rollouts\[1\]\.logprob is missing"):
        pseudo_label("pixel", missing)
    with pytest.raises(PseudoLabelError, match=r"pixel: rollouts\[0\]\.entropy is missing"):
        pseudo_label("pixel", [{"answer": "6", "logprob": [-0.1]}])


def test_bad_inputs_are_named():
    two = [ro("5", [0.1, 0.2], [-0.1, -0.2]), ro("6", [0.1], [-0.1])]
    with pytest.raises(PseudoLabelError, match=r"rollouts\[0\]\.logprob has 1 tokens but entropy has 2"):
        pseudo_label("pixel", [ro("5", [0.1, 0.2], [-0.1])])
    with pytest.raises(PseudoLabelError, match=r"decisive_masks\[1\] has 2 entries but rollouts\[1\] has 1"):
        pseudo_label("pixel", two, decisive_masks=[None, [True, False]])
    with pytest.raises(PseudoLabelError, match=r"decisive_masks\[0\] selects no token"):
        pseudo_label("pixel", two, decisive_masks=[[False, False], None])
    with pytest.raises(PseudoLabelError, match=r"decisive_masks\[0\]\[1\] must be a bool"):
        pseudo_label("pixel", two, decisive_masks=[[True, 1], None])
    with pytest.raises(PseudoLabelError, match=r"decisive_masks has 1 entries for 2 rollouts"):
        pseudo_label("pixel", two, decisive_masks=[None])
    with pytest.raises(PseudoLabelError, match=r"rollouts\[0\]\.logprob holds 0.5 at decisive token 0"):
        pseudo_label("pixel", [ro("5", logprob=[0.5])])
    with pytest.raises(PseudoLabelError, match=r"rollouts\[0\]\.entropy holds -0.5"):
        pseudo_label("pixel", [ro("5", entropy=[-0.5])])
    with pytest.raises(PseudoLabelError, match=r"reliability\[1\] must be a finite number >= 0, got nan"):
        pseudo_label("pixel", two, reliability=[1.0, float("nan")])
    with pytest.raises(PseudoLabelError, match=r"visual_fidelity\[0\] must be a finite number in \[0, 1\]"):
        pseudo_label("pixel", two, visual_fidelity=[1.5, 1.0])
    with pytest.raises(PseudoLabelError, match=r"reliability has 3 entries for 2 rollouts"):
        pseudo_label("pixel", two, reliability=[1.0, 1.0, 1.0])
    for kw, flag in (({"temperature": 0.0}, "temperature"), ({"delta": -0.1}, "delta"),
                     ({"conformal_qhat": float("nan")}, "conformal_qhat"),
                     ({"duplicate_threshold": 1.5}, "duplicate_threshold")):
        with pytest.raises(PseudoLabelError, match=rf"pixel: {flag} must be"):
            pseudo_label("pixel", two, **kw)

# ----------------------------------------------------------------------------------------- calibration

def test_calibrate_pixel_worked_by_hand():
    # per rollout (answer, H, mean logprob); golds compared through answer equivalence
    groups_spec = [
        ([("5", 0.1, -0.1), ("5", 0.2, -0.3), ("6", 0.9, -1.2)], "5.0"),
        ([("0.5", 0.3, -0.2), (r"\frac{1}{2}", 0.1, -0.1), ("7", 0.2, -0.4)], "1/2"),
        ([("3", 0.5, -0.9), ("4", 0.1, -0.2)], "3"),
        ([("8", 0.2, -0.3), ("9", 0.4, -0.6)], "2"),  # gold never sampled
        ([("1", 0.0, -0.05), ("1", 0.3, -0.5), ("2", 0.2, -0.7)], "1"),
    ]
    groups = [[ro(a, [h], [lp]) for a, h, lp in spec] for spec, _ in groups_spec]
    golds = [gold for _, gold in groups_spec]
    cal = calibrate_pixel(groups, golds, alpha=0.4)
    correct = [[1, 1, 0], [1, 1, 0], [1, 0], [0, 0], [1, 1, 0]]
    conf = [math.exp(lp) for spec, _ in groups_spec for _, _, lp in spec]
    flat = [c for row in correct for c in row]
    assert cal.temperature == pytest.approx(fit_temperature(conf, flat), rel=1e-12)
    t = cal.temperature
    scores = []
    for (spec, _), right in zip(groups_spec, correct):
        w = [math.exp(-h) * temperature_scaled(math.exp(lp), t) for _, h, lp in spec]
        scores.append(1 - sum(wj for wj, c in zip(w, right) if c) / sum(w))
    # n = 5, alpha = 0.4: ceil(6 * 0.6) = 4 -> the 4th smallest nonconformity
    assert cal.conformal_qhat == pytest.approx(sorted(scores)[3], rel=1e-9)
    assert cal.conformal_qhat == pytest.approx(conformal_threshold([1 - s for s in scores], 0.4), rel=1e-9)
    assert cal.num_questions == 5


def test_calibrate_pixel_fits_alpha_to_a_target_coverage_worked_by_hand():
    """Pixelis supp. S8: "abstention targets ~90% coverage". Every rollout has weight exp(0) * 0.5, so the
    normalised supports are the vote shares; question g is answered at threshold qhat iff
    1 - s_(1) <= qhat < 1 - s_(2) (only voted answers enter a set: a unanimous question has no s_(2)) and the
    margin s_(1) - s_(2) >= delta."""
    spec = [(["5", "5", "5", "5"], "5"),   # share 1: answered for every qhat >= 0; gold score 0
            (["5", "5", "5", "6"], "5"),   # 0.75 / 0.25: [0.25, 0.75); score 0.25
            (["3", "3", "4", "9"], "3"),   # 0.5 / 0.25: [0.5, 0.75); score 0.5
            (["7", "8", "8", "8"], "2")]   # gold never voted: score 1; answered (wrongly) in [0.25, 0.75)
    groups = [[ro(a) for a in answers] for answers, _ in spec]
    golds = [gold for _, gold in spec]
    # thresholds by k (sorted scores 0, 0.25, 0.5, 1): k=4 qhat 1 answers the first only; k=3 qhat 0.5 all four;
    # k=2 qhat 0.25 three (not the third); k=1 qhat 0 the first only
    for target in (0.9, 1.0, 0.5):
        cal = calibrate_pixel(groups, golds, target_coverage=target)
        assert (cal.conformal_qhat, cal.coverage) == (0.5, 1.0)
        assert cal.alpha == pytest.approx(1 - 3 / 5)  # q_3 is the threshold of alpha = 1 - k / (n + 1)
    # the default alpha 0.1 needs k = ceil(5 * 0.9) = 5 > 4: every voted answer in the set, unanimous only
    default = calibrate_pixel(groups, golds)
    assert math.isinf(default.conformal_qhat) and default.alpha == 0.1 and default.coverage == 0.25
    for g, (answers, _) in enumerate(spec):
        label = pseudo_label("pixel", groups[g], conformal_qhat=0.5)
        assert not label.abstain and label.label == max(set(answers), key=answers.count)
    # a margin no question but the first reaches: no threshold gets 0.9; the largest coverage (0.25, at every
    # k) is taken at the largest k, the threshold 1
    strict = calibrate_pixel(groups, golds, target_coverage=0.9, delta=0.6)
    assert (strict.conformal_qhat, strict.coverage) == (1.0, 0.25)
    assert calibrate_pixel(groups, golds, target_coverage=0.25).conformal_qhat == 1.0  # k = 4 reaches it
    with pytest.raises(PseudoLabelError, match="not both"):
        calibrate_pixel(groups, golds, alpha=0.2, target_coverage=0.9)
    for bad in (0, 1.5, "0.9", float("nan"), True):
        with pytest.raises(PseudoLabelError, match="target_coverage must be a number in \\(0, 1\\]"):
            calibrate_pixel(groups, golds, target_coverage=bad)
    for bad in (0, 1, -0.1, "0.1", float("inf")):  # split conformal's miscoverage: open at both ends
        with pytest.raises(PseudoLabelError, match="alpha must be a number in \\(0, 1\\)"):
            calibrate_pixel(groups, golds, alpha=bad)


def test_calibrate_pixel_per_group_options_and_errors():
    groups = [[ro("5", [0.1], [-0.1]), ro("6", [0.1], [-0.2])],
              [ro("7", [0.2], [-0.1]), ro("8", [0.1], [-0.9])]]
    plain = calibrate_pixel(groups, ["5", "8"], alpha=0.4)
    rel = calibrate_pixel(groups, ["5", "8"], alpha=0.4, reliability=[[1.0, 0.1], None])
    assert rel.temperature == plain.temperature and rel.conformal_qhat < plain.conformal_qhat
    assert math.isinf(calibrate_pixel(groups, ["5", "8"], alpha=0.1).conformal_qhat)  # too few for alpha
    with pytest.raises(TypeError, match="fits temperature"):
        calibrate_pixel(groups, ["5", "8"], temperature=1.2)
    with pytest.raises(PseudoLabelError, match="one gold answer per group"):
        calibrate_pixel(groups, ["5"])
    with pytest.raises(PseudoLabelError, match=r"golds\[1\] must be a non-empty answer"):
        calibrate_pixel(groups, ["5", ""])
    groups[1][0]["entropy"] = [float("nan")]
    with pytest.raises(PseudoLabelError, match=r"groups\[1\]: pixel: rollouts\[0\]\.entropy holds NaN"):
        calibrate_pixel(groups, ["5", "8"])

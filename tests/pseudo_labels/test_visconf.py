import pytest

from ttrl_lightning.pseudo_labels import PseudoLabelError, pseudo_label

# Hand-worked RWC. One token per rollout: self-certainty k = [3, 0, 2, 1]. The pooled quantiles (linear
# interpolation over 0, 1, 2, 3) are Q.05 = 0.15 and Q.95 = 2.85, so C = clip((k - 0.15) / 2.7) =
# [1, 0, 1.85/2.7, 0.85/2.7]. With V = [0.1, 0.9, 0.5, 0.8]: Z = V C = [0.1, 0, 0.3426, 0.2519],
# descending ranks r = [3, 4, 1, 2], RWC weights (N - r)/(N - 1) = [1/3, 0, 1, 2/3].
# Answers [5, 5, 6, 7]: Vote(5) = 1/3, Vote(6) = 1, Vote(7) = 2/3 -> y* = 6 (majority would say 5).
K = [3.0, 0.0, 2.0, 1.0]
V = [0.1, 0.9, 0.5, 0.8]
ANSWERS = ["5", "5", "6", "7"]


def group(with_v=True):
    return [{"answer": a, "self_certainty": [k], **({"visual_engagement": [v]} if with_v else {})}
            for a, k, v in zip(ANSWERS, K, V)]


def test_rwc_over_visconf_worked_by_hand():
    out = pseudo_label("visconf", group())
    assert out.info["signal"] == "visconf"
    assert out.info["scores"] == pytest.approx([0.1, 0.0, 0.5 * 1.85 / 2.7, 0.8 * 0.85 / 2.7])
    assert out.info["support"] == pytest.approx({"5": 1 / 3, "6": 1.0, "7": 2 / 3})
    assert out.label == "6" and not out.abstain
    assert out.rewards == [0.0, 0.0, 1.0, 0.0]
    assert pseudo_label("majority", group()).label == "5"


def test_text_only_falls_back_to_calibrated_self_certainty():
    # Z = C = [1, 0, 0.685, 0.315]: ranks [1, 4, 2, 3], weights [1, 0, 2/3, 1/3]
    out = pseudo_label("visconf", group(with_v=False))
    assert out.info["signal"] == "self_certainty_only"
    assert out.info["support"] == pytest.approx({"5": 1.0, "6": 2 / 3, "7": 1 / 3})
    assert out.label == "5" and out.rewards == [1.0, 1.0, 0.0, 0.0]


def test_alpha_geometric_fusion_ranks_like_the_product_at_one_half():
    assert pseudo_label("visconf", group(), alpha=0.5).label == "6"
    assert pseudo_label("visconf", group(), alpha=0.0).label == "5"  # C alone


def test_score_tie_goes_to_the_answer_seen_first():
    rollouts = [{"answer": "5", "self_certainty": [1.0]}, {"answer": "6", "self_certainty": [1.0]}]
    out = pseudo_label("visconf", rollouts)
    assert out.label == "5" and out.info["support"] == pytest.approx({"5": 0.5, "6": 0.5})


def test_all_unextractable_abstains():
    rollouts = [{"text": "hmm", "self_certainty": [k]} for k in K]
    out = pseudo_label("visconf", rollouts)
    assert out.abstain and out.label is None and out.rewards == [0.0] * 4


def test_unextractable_best_ranked_abstains():
    rollouts = group()
    rollouts[2] = {"text": "hmm", "self_certainty": [2.0], "visual_engagement": [0.5]}
    rollouts[3]["answer"] = None
    rollouts[3]["text"] = "?"
    out = pseudo_label("visconf", rollouts)  # NO_ANSWER holds 1 + 2/3 against 5's 1/3
    assert out.abstain


def test_one_rollout():
    out = pseudo_label("visconf", [{"answer": "4", "self_certainty": [0.2, 0.4], "visual_engagement": [0.5, 0.5]}])
    assert out.label == "4" and out.rewards == [1.0]


def test_missing_and_partial_signals_are_named():
    with pytest.raises(PseudoLabelError, match=r"visconf: rollouts\[0\]\.self_certainty is missing"):
        pseudo_label("visconf", [{"answer": "4"}])
    rollouts = group()
    del rollouts[2]["visual_engagement"]
    with pytest.raises(PseudoLabelError, match=r"rollouts\[2\]\.visual_engagement is missing"):
        pseudo_label("visconf", rollouts)
    rollouts = group()
    rollouts[1]["visual_engagement"] = [0.5, 0.5]
    with pytest.raises(PseudoLabelError, match=r"rollouts\[1\]\.visual_engagement has 2 tokens"):
        pseudo_label("visconf", rollouts)


def test_nan_signal_is_a_clear_error():
    rollouts = group()
    rollouts[3]["visual_engagement"] = [float("nan")]
    with pytest.raises(PseudoLabelError, match=r"visconf: rollouts\[3\]\.visual_engagement holds NaN at token 0"):
        pseudo_label("visconf", rollouts)

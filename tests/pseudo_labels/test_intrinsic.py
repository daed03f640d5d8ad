import pytest

from ttrl_lightning.pseudo_labels import PseudoLabelError, pseudo_label


def test_self_certainty_reward_is_the_mean_token_self_certainty():
    out = pseudo_label("self_certainty", [{"answer": "1", "self_certainty": [1.0, 2.0, 3.0]},
                                          {"answer": "2", "self_certainty": [4.0]}])
    assert out.label is None and out.abstain is False
    assert out.rewards == pytest.approx([2.0, 4.0])


def test_entropy_reward_is_minus_the_mean_token_entropy():
    out = pseudo_label("entropy", [{"answer": "1", "entropy": [0.5, 1.5]}, {"answer": "1", "entropy": [2.0]}])
    assert out.label is None and out.abstain is False
    assert out.rewards == pytest.approx([-1.0, -2.0])


@pytest.mark.parametrize("method", ["self_certainty", "entropy"])
def test_answers_do_not_matter_and_unextractable_never_abstains(method):
    rollouts = [{"text": "no answer here", method: [0.3, 0.1]}, {"text": "nor here", method: [0.2]}]
    out = pseudo_label(method, rollouts)
    sign = 1 if method == "self_certainty" else -1
    assert not out.abstain and out.rewards == pytest.approx([sign * 0.2, sign * 0.2])  # a tie stays a tie


@pytest.mark.parametrize("method", ["self_certainty", "entropy"])
def test_one_rollout(method):
    out = pseudo_label(method, [{"answer": "1", method: [0.25, 0.75]}])
    assert out.rewards == pytest.approx([0.5 if method == "self_certainty" else -0.5])


@pytest.mark.parametrize("method", ["self_certainty", "entropy"])
def test_missing_signal_is_named(method):
    with pytest.raises(PseudoLabelError, match=rf"{method}: rollouts\[1\]\.{method} is missing"):
        pseudo_label(method, [{"answer": "1", method: [0.1]}, {"answer": "1"}])


@pytest.mark.parametrize("method", ["self_certainty", "entropy"])
def test_nan_and_empty_signals_are_named(method):
    with pytest.raises(PseudoLabelError, match=rf"rollouts\[0\]\.{method} holds NaN at token 2"):
        pseudo_label(method, [{method: [0.1, 0.2, float("nan")]}])
    with pytest.raises(PseudoLabelError, match=rf"rollouts\[0\]\.{method} must be a non-empty list of numbers"):
        pseudo_label(method, [{method: []}])

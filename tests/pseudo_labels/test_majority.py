import pytest

from ttrl_lightning.pseudo_labels import pseudo_label


def ro(*answers):
    return [{"answer": a} if a is not None else {"text": "I cannot tell."} for a in answers]


def test_most_frequent_answer_and_rewards():
    out = pseudo_label("majority", ro("5", "6", "5", "7"))
    assert out.label == "5" and not out.abstain
    assert out.rewards == [1.0, 0.0, 1.0, 0.0]
    assert out.info["majority_ratio"] == 0.5
    assert out.info["support"] == {"5": 2.0, "6": 1.0, "7": 1.0}


def test_reward_uses_answer_equivalence_not_string_equality():
    out = pseudo_label("majority", ro("3", "0.5", r"\frac{1}{2}", "1/2"))
    assert out.label == "0.5"
    assert out.rewards == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("answers,label", [(("6", "5", "5", "6"), "6"), (("5", "6", "6", "5"), "5")])
def test_tie_goes_to_the_answer_seen_first(answers, label):
    out = pseudo_label("majority", ro(*answers))
    assert out.label == label and out.info["margin"] == 0.0


def test_unextractable_majority_abstains():
    out = pseudo_label("majority", ro(None, "5", None))
    assert out.abstain and out.label is None
    assert out.rewards == [0.0, 0.0, 0.0]
    assert out.info["majority_ratio"] == pytest.approx(2 / 3)


def test_tie_with_unextractable_seen_first_abstains_by_the_tie_rule():
    assert pseudo_label("majority", ro(None, "5")).abstain
    out = pseudo_label("majority", ro("5", None))
    assert out.label == "5" and out.rewards == [1.0, 0.0]


def test_all_unextractable_abstains():
    out = pseudo_label("majority", ro(None, None, None))
    assert out.abstain and out.label is None and out.rewards == [0.0, 0.0, 0.0]


def test_unextractable_minority_gets_zero():
    out = pseudo_label("majority", ro("5", None, "5"))
    assert out.label == "5" and out.rewards == [1.0, 0.0, 1.0]


def test_one_rollout():
    out = pseudo_label("majority", ro("7"))
    assert out.label == "7" and out.rewards == [1.0] and out.info["majority_ratio"] == 1.0
    assert pseudo_label("majority", ro(None)).abstain


def test_both_views_are_pooled():
    rollouts = [{"answer": "5"}, {"answer": "6", "view": "reframed"}, {"answer": "6", "view": "reframed"}]
    assert pseudo_label("majority", rollouts).label == "6"

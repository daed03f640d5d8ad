"""The collapse guards of majority-vote TTRL on hand-worked votes, each against its source's rule (module docstring
of pseudo_labels.majority): SCRL's consensus gate, SeRL / TTRL-Guard's locked questions, SRT's soft reward."""
import pytest

from ttrl_lightning.pseudo_labels import PseudoLabelError, pseudo_label


def ro(*answers):
    return [{"answer": a} if a is not None else {"text": "I cannot tell."} for a in answers]


# 10 votes: "5" x 5, "6" x 3, "7" x 1, unextractable x 1 -> share(5) = 0.5, lead over "6" = 0.2
TEN = ro("5", "6", "5", "7", "5", "6", None, "5", "6", "5")


def test_without_options_majority_is_ttrls_rule():
    out = pseudo_label("majority", TEN)
    assert out.label == "5" and not out.abstain and not out.negative
    assert out.rewards == [1.0, 0, 1, 0, 1, 0, 0, 1, 0, 1]


@pytest.mark.parametrize("min_share, min_margin, passes", [
    (0.5, 0.15, True),    # SCRL's defaults: 0.5 >= 0.5 and 0.2 > 0.15
    (0.51, None, False),  # the share is below
    (None, 0.2, False),   # the lead must exceed the margin: 0.2 is not > 0.2
    (None, 0.19, True),
    (0.0, 0.0, True),
])
def test_consensus_gate(min_share, min_margin, passes):
    out = pseudo_label("majority", TEN, min_share=min_share, min_margin=min_margin)
    if passes:
        assert out.label == "5" and not out.abstain and out.rewards[0] == 1.0
    else:
        assert out.abstain and out.negative and out.label is None and out.rewards == [0.0] * 10
        assert out.info["gate"] == "failed" and out.info["majority_ratio"] == 0.5


def test_the_runner_up_may_be_the_unextractable_votes():
    # "5" x 3, unextractable x 2, "6" x 1: lead 3/6 - 2/6 = 1/6
    votes = ro("5", None, "5", None, "6", "5")
    assert pseudo_label("majority", votes, min_margin=0.16).label == "5"
    assert pseudo_label("majority", votes, min_margin=0.17).negative
    # a single answer class: the lead is its whole share
    assert pseudo_label("majority", ro("5", "5"), min_share=1.0, min_margin=0.99).label == "5"


def test_locked_questions_are_left_out_with_their_label_kept():
    votes = ro("5", "5", "5", "5", "6")  # share 0.8
    kept = pseudo_label("majority", votes, max_share=0.8)  # not more than 0.8: trained
    assert not kept.abstain and kept.rewards == [1.0, 1.0, 1.0, 1.0, 0.0]
    locked = pseudo_label("majority", votes, max_share=0.79)
    assert locked.abstain and not locked.negative and locked.label == "5" and locked.info["locked"]
    assert locked.rewards == [0.0] * 5
    # the gate comes first: a question that fails it is negative, not locked
    assert pseudo_label("majority", votes, min_share=0.9, max_share=0.5).negative


@pytest.mark.parametrize("option", ["min_share", "min_margin", "max_share"])
@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_a_share_out_of_range_is_refused(option, bad):
    with pytest.raises(PseudoLabelError, match=f"{option} must be a share in"):
        pseudo_label("majority", TEN, **{option: bad})


def test_soft_majority_rewards_each_vote_with_its_answers_share_of_the_extractable_votes():
    out = pseudo_label("soft_majority", TEN)
    # 9 extractable votes: "5" 5/9, "6" 3/9, "7" 1/9, unextractable 0
    expected = [5 / 9, 3 / 9, 5 / 9, 1 / 9, 5 / 9, 3 / 9, 0.0, 5 / 9, 3 / 9, 5 / 9]
    assert out.rewards == pytest.approx(expected)
    assert out.label == "5" and not out.abstain and out.info["majority_ratio"] == 0.5
    # answer equivalence: 0.5 and 1/2 are one answer
    assert pseudo_label("soft_majority", ro("0.5", "1/2", "3")).rewards == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    # an unextractable majority still labels by the extractable votes; all unextractable abstains
    assert pseudo_label("soft_majority", ro(None, None, "4")).rewards == [0.0, 0.0, 1.0]
    none = pseudo_label("soft_majority", ro(None, None))
    assert none.abstain and none.label is None and none.rewards == [0.0, 0.0]

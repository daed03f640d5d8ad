"""Near-duplicate rollouts (``pseudo_labels.pixel.duplicates``): trigram Jaccard similarity and what duplicates do
to the vote."""
import pytest

from ttrl_lightning.pseudo_labels import pseudo_label
from ttrl_lightning.pseudo_labels.pixel.labeler import rollout_similarity

from tests.pseudo_labels.pixel._votes import ro


# ------------------------------------------------------------------------------------------ duplicates

def test_rollout_similarity_is_the_jaccard_index_of_character_trigrams():
    assert rollout_similarity("abcd", "abce") == pytest.approx(1 / 3)  # {abc, bcd} vs {abc, bce}
    assert rollout_similarity("the answer is 5", "the answer is 5") == 1.0
    assert rollout_similarity("ab", "ab") == 1.0 and rollout_similarity("ab", "abc") == 0.0
    assert rollout_similarity("xyz", "abc") == 0.0


def test_duplicates_stay_in_the_vote_and_leave_the_update():
    # "abcdef" ~ "abcdefg" 4/5; "abcdefg" ~ "abcdefgh" 5/6; "abcdef" ~ "abcdefgh" 4/6
    texts = ["abcdef", "abcdefg", "abcdefgh", "abcdef", None]
    rollouts = [ro(a, text=t) for a, t in zip(["5", "5", "6", "5", "5"], texts)]
    out = pseudo_label("pixel", rollouts, duplicate_threshold=0.75)
    # rollout 1 copies rollout 0; rollout 2 is close only to the rejected rollout 1, so it is kept;
    # rollout 3 is an exact copy of rollout 0; rollout 4 has no text
    assert out.row_mask == [True, False, True, False, True]
    assert out.info["duplicates"] == 2
    assert out.info["support"] == pytest.approx({"5": 2.0, "6": 0.5})  # every rollout still votes
    assert out.rewards == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert pseudo_label("pixel", rollouts, duplicate_threshold=0.8).row_mask == [
        True, True, False, False, True]  # 4/5 is not above 0.8, 5/6 is
    off = pseudo_label("pixel", rollouts, duplicate_threshold=None)
    assert off.row_mask == [True] * 5 and off.info["duplicates"] == 0


def test_default_threshold_rejects_exact_copies():
    text = r"Adding the two numbers gives \boxed{5}"
    rollouts = [ro(None, text=text), ro(None, text=text), ro(None, text="So it is \\boxed{5}")]
    out = pseudo_label("pixel", rollouts)
    assert out.label == "5" and out.row_mask == [True, False, True]

"""TTRL's labelling stage as a free function (``modules.ttrl.labelling``): called with a ``VotingSpec`` and a
``LabellingContext``, no module, on hand-made votes whose rewards are worked by hand."""
import pytest
import torch

from ttrl_lightning.answers.label import NO_ANSWER
from ttrl_lightning.errors import UserError
from ttrl_lightning.modules.ttrl import LabellingContext, label_votes
from ttrl_lightning.modules.ttrl.labelling import question_ids, trained_layout, votes_by_question
from ttrl_lightning.modules.ttrl.specs import VotingSpec
from ttrl_lightning.rollout.base import Rollouts


def votes(answers_per_prompt: list[list[str]]) -> Rollouts:
    """One prompt per list, its votes' texts ``"... so <answer>"``, one token each; prompt-major rows."""
    texts = [f"so {a}" for answers in answers_per_prompt for a in answers]
    n = len(answers_per_prompt[0])
    R = len(texts)
    ones = torch.ones(R, 1, dtype=torch.long)
    return Rollouts(prompt_ids=ones, prompt_mask=ones, completion_ids=ones * 7, completion_mask=ones, texts=texts,
                    group=torch.arange(len(answers_per_prompt)).repeat_interleave(n), n=n, signals={})


def test_majority_rewards_are_laid_out_on_the_first_n_rows_of_each_prompt_worked_by_hand():
    # question 0: 3 of 4 votes say 5 -> label 5; question 1: 2 x 7, 1 x 8, 1 unreadable -> label 7
    v = votes([["5", "5", "6", "5"], ["7", "x", "7", "8"]])
    voting = VotingSpec(labeler="majority", num_votes=4, num_trained=2, answer_extractor="last_number")
    out = label_votes(v, {"prompt": ["a", "b"], "id": ["qa", "qb"]}, voting, LabellingContext(),
                      signal_names=())
    # the first N = 2 rows of each prompt, prompt-major: q0 rows (5, 5) -> 1, 1; q1 rows (7, x) -> 1, 0
    assert out.rewards.tolist() == [1.0, 1.0, 1.0, 0.0]
    assert out.group_mask.tolist() == [True, True] and out.row_mask.tolist() == [True] * 4
    assert [lab.label for lab in out.detail.labels] == ["5", "7"]
    assert out.detail.answers == [["5", "5", "6", "5"], ["7", NO_ANSWER, "7", "8"]]
    assert out.rollouts.texts == ["so 5", "so 5", "so 7", "so x"]


def test_the_gate_abstains_and_the_negative_branch_trains_the_abstained_question():
    v = votes([["5", "6", "7", "8"], ["3", "3", "3", "3"]])  # q0: no majority share >= 0.5
    voting = VotingSpec(labeler="majority", num_votes=4, num_trained=4, answer_extractor="last_number",
                        options={"min_share": 0.5, "min_margin": 0.15})
    batch = {"prompt": ["a", "b"]}
    plain = label_votes(v, batch, voting, LabellingContext(), signal_names=())
    assert plain.group_mask.tolist() == [False, True]
    negative = label_votes(v, batch, voting, LabellingContext(), signal_names=(), negative_shift=0.5)
    assert negative.group_mask.tolist() == [True, True]
    assert negative.rewards[:4].tolist() == [0.0] * 4  # RESTRAIN: the failed question's rows get reward 0


def test_gold_reward_reads_the_batch_gold_and_a_question_without_one_is_named():
    v = votes([["5", "6"], ["7", "7"]])
    voting = VotingSpec(labeler="gold_reward", num_votes=2, num_trained=2, answer_extractor="last_number")
    out = label_votes(v, {"prompt": ["a", "b"], "gold": ["6", "7"]}, voting, LabellingContext(), signal_names=())
    assert out.rewards.tolist() == [0.0, 1.0, 1.0, 1.0]
    with pytest.raises(UserError, match=r"questions \['q1'\] have none"):
        label_votes(v, {"prompt": ["a", "b"], "gold": ["6", None]}, voting, LabellingContext(), signal_names=())


def test_self_harmonys_majority_warm_up_runs_for_its_steps_only():
    # original view 5 5 5 6, reframed 6 7 8 9: the harmonic mean picks 6 (the one answer in both views), the
    # majority over both views 5 (3 of 8 votes against 2)
    v = votes([["5", "5", "5", "6"], ["6", "7", "8", "9"]])
    voting = VotingSpec(labeler="self_harmony", num_votes=4, num_trained=4, answer_extractor="last_number",
                        fused_prompt_template="{prompt} Reframe it, then solve.", warmup_majority_steps=2)
    labels = [label_votes(v, {"prompt": ["a"]}, voting, LabellingContext(), signal_names=(),
                          global_step=step).detail.labels[0].label for step in (0, 1, 2, 5)]
    assert labels == ["5", "5", "6", "6"]


def test_votes_are_grouped_by_question_across_views_and_a_missing_signal_is_named():
    # two questions, two views: prompts 0, 1 are the questions' originals, 2, 3 their reframed views
    v = votes([["1", "1"], ["2", "2"], ["3", "3"], ["4", "4"]])
    groups = votes_by_question(v, 2, ["original", "original", "reframed", "reframed"], [None, None], (),
                               "last_number")
    assert [list(g.answers) for g in groups] == [["1", "1", "3", "3"], ["2", "2", "4", "4"]]
    assert list(groups[0].views) == ["original", "original", "reframed", "reframed"]
    with pytest.raises(RuntimeError, match="did not record signal 'entropy'"):
        votes_by_question(v, 2, ["original"] * 2 + ["reframed"] * 2, [None, None], ("entropy",), "last_number")


def test_layout_and_ids():
    per_vote = torch.arange(2 * 2 * 3).view(2, 6)  # Q 2, V 2, M 3
    # prompt v * Q + q, its first N = 2 votes: q0v0 (0, 1), q1v0 (6, 7), q0v1 (3, 4), q1v1 (9, 10)
    assert trained_layout(per_vote, 2, 3, 2).tolist() == [0, 1, 6, 7, 3, 4, 9, 10]
    assert question_ids({"prompt": ["a", "b"]}) == ["q0", "q1"]
    with pytest.raises(UserError, match=r"repeat within a batch: \['x'\]"):
        question_ids({"prompt": ["a", "b"], "id": ["x", "x"]})


def test_a_label_budget_labels_its_questions_with_gold_and_the_rest_by_the_labeler():
    """voting.gold_budget: the questions whose id falls in the budget get gold_reward's label and rewards, the
    others the labeler's; the budget is a fixed set of ids, about its share of them."""
    from ttrl_lightning.modules.ttrl.specs import budgeted

    ids = [f"q{i}" for i in range(4000)]
    chosen = [i for i in ids if budgeted(i, 0.1)]
    assert 330 <= len(chosen) <= 470 and chosen == [i for i in ids if budgeted(i, 0.1)]
    assert not any(budgeted(i, 0.0) for i in ids) and all(budgeted(i, 1.0) for i in ids)
    inside, outside = next(i for i in ids if budgeted(i, 0.1)), next(i for i in ids if not budgeted(i, 0.1))
    # both questions' majority (5) is wrong; gold is 6
    v = votes([["5", "5", "6", "5"], ["5", "5", "6", "5"]])
    voting = VotingSpec(labeler="majority", num_votes=4, num_trained=4, answer_extractor="last_number",
                        gold_budget=0.1)
    batch = {"prompt": ["a", "b"], "id": [inside, outside], "gold": ["6", "6"]}
    out = label_votes(v, batch, voting, LabellingContext(), signal_names=())
    assert [lab.label for lab in out.detail.labels] == ["6", "5"]
    assert out.rewards.tolist() == [0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    with pytest.raises(UserError, match="gold_budget labels questions"):
        label_votes(v, {**batch, "gold": [None, "6"]}, voting, LabellingContext(), signal_names=())
    with pytest.raises(UserError, match="voting.gold_budget"):
        VotingSpec(labeler="majority", gold_budget=1.5)

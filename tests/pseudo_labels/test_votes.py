"""The columnar vote group every labeler reads: built from an engine's tensors it holds what a pool record of
the same rows holds, and every labeler decides the same from either."""
import pytest
import torch

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.pseudo_labels import PSEUDO_LABELERS, PseudoLabelError, QuestionVotes, pseudo_label, question_votes

#: options a labeler needs besides its votes
NEEDS = {"random_reward": {"seed": 3}, "gold_reward": {"gold": "1/2"}, "self_harmony": {"w_f": 0.0}}


def _engine_rows(n=6, width=7, seed=0):
    """Engine-like rows: float32 signals on every position, a completion mask with holes (observations) and
    padding, NaN where the mask is off (what a padded engine tensor may hold there)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, width, generator=g) > 0.3
    mask[:, 0] = True
    entropy = torch.rand(n, width, generator=g, dtype=torch.float32) * 2
    logprob = -torch.rand(n, width, generator=g, dtype=torch.float32) * 3
    certainty = torch.rand(n, width, generator=g, dtype=torch.float32) * 5
    signals = {name: torch.where(mask, x, torch.tensor(float("nan"))) for name, x in
               (("entropy", entropy), ("logprob", logprob), ("self_certainty", certainty))}
    texts = ["so 0.5", "it is 1/2", "maybe 3", "0.5", "I do not know", "\\boxed{3}"][:n]
    answers = ["0.5", "1/2", "3", "0.5", NO_ANSWER, "3"][:n]
    views = ["original", "original", "original", "reframed", "reframed", "reframed"][:n]
    return answers, texts, views, signals, mask


def _as_dicts(answers, texts, views, signals, mask):
    """The pool-record reading of the same rows: each signal's masked tokens as a list of Python floats."""
    return [{"answer": a, "text": t, "view": v,
             **{name: x[j][mask[j]].tolist() for name, x in signals.items()}}
            for j, (a, t, v) in enumerate(zip(answers, texts, views))]


def test_from_tensors_keeps_the_own_tokens_left_aligned_and_widens_exactly():
    answers, texts, views, signals, mask = _engine_rows()
    group = QuestionVotes.from_tensors(answers, texts, views, signals, mask)
    assert group.signals["entropy"].lengths.tolist() == mask.sum(1).tolist()
    for j in range(len(answers)):
        row = group.token_signal(j, "entropy", "t")
        assert row.dtype == torch.float64
        assert row.tolist() == signals["entropy"][j][mask[j]].tolist()  # float32 -> float64, no rounding
        assert not bool(group.signals["entropy"].values[j, row.numel():].any())  # 0 beyond the length
    assert group.answers == ("0.5", "0.5", "3", "0.5", NO_ANSWER, "3")  # 1/2 joins 0.5's class
    assert group.view_rows("reframed") == [3, 4, 5]


@pytest.mark.parametrize("method", sorted(PSEUDO_LABELERS.names()))
def test_every_labeler_decides_the_same_from_the_group_and_from_pool_dicts(method):
    for seed in range(3):
        rows = _engine_rows(seed=seed)
        from_group = pseudo_label(method, QuestionVotes.from_tensors(*rows), **NEEDS.get(method, {}))
        from_dicts = pseudo_label(method, _as_dicts(*rows), **NEEDS.get(method, {}))
        assert from_group == from_dicts


def test_a_non_finite_value_inside_a_vote_is_refused_and_one_outside_is_not():
    answers, texts, views, signals, mask = _engine_rows()
    QuestionVotes.from_tensors(answers, texts, views, signals, mask)  # NaN off the mask: fine
    j, k = 2, int(torch.nonzero(mask[2])[1])
    bad = dict(signals, logprob=signals["logprob"].clone())
    bad["logprob"][j, k] = float("inf")
    with pytest.raises(PseudoLabelError, match=r"rollouts\[2\]\.logprob holds inf at token 1"):
        QuestionVotes.from_tensors(answers, texts, views, bad, mask)


def test_a_signal_the_labeler_needs_but_the_group_lacks_is_named():
    answers, texts, views, signals, mask = _engine_rows()
    group = QuestionVotes.from_tensors(answers, texts, views, {"entropy": signals["entropy"]}, mask)
    with pytest.raises(PseudoLabelError, match=r"pixel: rollouts\[0\]\.logprob is missing"):
        pseudo_label("pixel", group)


def test_gold_joins_the_votes_classes_and_a_group_passes_through():
    answers, texts, views, signals, mask = _engine_rows()
    group = QuestionVotes.from_tensors(answers, texts, views, signals, mask)
    canon, gold = group.classes_with("\\frac{1}{2}")
    assert gold == "0.5" and canon == list(group.answers)
    assert question_votes(group) is group
    with pytest.raises(ValueError, match="views must be"):
        QuestionVotes(("1",), (None,), ("rephrased",))

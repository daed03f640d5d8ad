import itertools
import random

import pytest
import torch

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.consensus import (CONSENSUS, aggregate, average_ranks, borda_weights, conformal_set,
                                      conformal_threshold, dual_view_majority, harmonic_mean_select,
                                      pixelis_weights, rank_weights, vote_margin)


def naive_ranks(scores):
    """Average descending ranks by explicit sorting and grouping of ties."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ranks = [0.0] * len(scores)
    pos = 0
    while pos < len(order):
        end = pos
        while end + 1 < len(order) and scores[order[end + 1]] == scores[order[pos]]:
            end += 1
        avg = (pos + 1 + end + 1) / 2
        for k in range(pos, end + 1):
            ranks[order[k]] = avg
        pos = end + 1
    return ranks


def test_rank_weights_hand_worked_and_sum():
    w = rank_weights([0.9, 0.1, 0.5, 0.3])
    assert w.tolist() == pytest.approx([1.0, 0.0, 2 / 3, 1 / 3])
    rng = random.Random(0)
    for n in range(2, 40):
        s = [rng.choice([0.1, 0.2, 0.3, rng.random()]) for _ in range(n)]
        w = rank_weights(s)
        assert w.sum().item() == pytest.approx(n / 2)  # VisConf E.3
        ref = [(n - r) / (n - 1) for r in naive_ranks(s)]
        assert w.tolist() == pytest.approx(ref, abs=1e-12)
        assert average_ranks(s).tolist() == pytest.approx(naive_ranks(s))


def test_rank_weights_ties_and_degenerate():
    assert rank_weights([2.0, 2.0, 2.0]).tolist() == [0.5, 0.5, 0.5]
    assert rank_weights([3.0]).tolist() == [0.5]
    assert rank_weights([1.0, 5.0, 5.0]).tolist() == pytest.approx([0.0, 0.75, 0.75])
    for bad in ([], [1.0, float("nan")], [[1.0, 2.0]]):
        with pytest.raises(ValueError):
            rank_weights(bad)


def test_borda_p1_equals_scaled_rwc_plus_count():
    """VisConf appendix E.4: S_{p=1}(a) = (N - 1) S_RWC(a) + n_a."""
    rng = random.Random(1)
    for trial in range(50):
        n = rng.randint(2, 20)
        scores = [rng.choice([0.5, rng.random()]) for _ in range(n)]
        answers = [rng.choice("ABCD") for _ in range(n)]
        b = aggregate(answers, "borda", scores, p=1.0).support
        r = aggregate(answers, "rwc", scores).support
        for a in set(answers):
            assert b[a] == pytest.approx((n - 1) * r[a] + answers.count(a))


def test_rwc_hand_worked_minority_wins_where_majority_loses():
    answers = ["A", "B", "B", "C"]
    scores = [0.9, 0.1, 0.5, 0.3]
    d = aggregate(answers, "rwc", scores)
    assert d.answer == "A"
    assert d.support == pytest.approx({"A": 1.0, "B": 2 / 3, "C": 1 / 3})
    assert aggregate(answers, "majority").answer == "B"


def test_answer_tie_goes_to_earliest_supporting_rollout():
    assert aggregate(["B", "A", "A", "B"], "majority").answer == "B"
    assert aggregate(["C", "A", "B", "A", "B"], "majority").answer == "A"


def test_rwc_ties_are_exact_not_float_rounded():
    # N = 11: weights are k/10. B collects 0.6 + 0.7 and A collects 1.0 + 0.3 + 0.0: exactly tied, and
    # B's earliest rollout comes first, so B must win. Naive float sums would say A (1.3 > 1.2999...).
    assert 1.0 + 0.3 + 0.0 > 0.6 + 0.7  # the trap this test guards against
    answers = ["B", "A", "A", "B", "A", "C", "D", "E", "F", "G", "H"]
    weights_wanted = [0.6, 1.0, 0.3, 0.7, 0.0, 0.1, 0.2, 0.4, 0.5, 0.8, 0.9]
    d = aggregate(answers, "rwc", weights_wanted)  # scores = weights: same ordering
    assert rank_weights(weights_wanted).tolist() == pytest.approx(weights_wanted)
    assert d.answer == "B"
    assert d.support["A"] == d.support["B"] == pytest.approx(1.3)


def test_top1_ties_go_to_lowest_index():
    d = aggregate(["A", "B", "C"], "top1", [0.2, 0.7, 0.7])
    assert d.answer == "B" and d.index == 1


def test_wc_weighted_and_pixelis_weights():
    d = aggregate(["A", "B", "B"], "wc", [0.9, 0.5, 0.3])
    assert d.answer == "A" and d.support == pytest.approx({"A": 0.9, "B": 0.8})
    w = pixelis_weights(entropy=[0.0, 1.0], calibration=[0.5, 1.0], visual_fidelity=[1.0, 0.5],
                        reliability=[0.8, 0.9])
    ref = [1.0 * 0.5 * 1.0 * 0.8, torch.exp(torch.tensor(-1.0)).item() * 1.0 * 0.5 * 0.9]
    assert w.tolist() == pytest.approx(ref)
    assert aggregate(["A", "B"], "weighted", w).answer == "A"
    with pytest.raises(ValueError, match="non-negative"):
        aggregate(["A", "B"], "wc", [0.3, -0.1])


@pytest.mark.parametrize("method", ["top1", "rwc", "wc", "borda", "weighted"])
def test_rules_reject_bad_scores(method):
    with pytest.raises(ValueError):
        aggregate(["A", "B"], method, None)
    with pytest.raises(ValueError):
        aggregate(["A", "B"], method, [0.1, float("nan")])
    with pytest.raises(ValueError):
        aggregate(["A", "B"], method, [0.1, 0.2, 0.3])


def test_bad_answers_and_unknown_method():
    with pytest.raises(ValueError):
        aggregate([], "majority")
    with pytest.raises(TypeError):
        aggregate(["A", None], "majority")
    with pytest.raises(KeyError, match="known"):
        aggregate(["A"], "no_such_rule")
    assert set(CONSENSUS.names()) >= {"majority", "top1", "rwc", "wc", "borda", "weighted"}


def test_every_rule_agrees_with_a_naive_vote_loop():
    rng = random.Random(3)
    for trial in range(200):
        n = rng.randint(1, 12)
        answers = [rng.choice("ABC") for _ in range(n)]
        scores = [rng.choice([0.25, 0.5, rng.random()]) for _ in range(n)]
        ranks = naive_ranks(scores)
        weights = {
            "majority": [1.0] * n,
            "rwc": [0.5] * n if n == 1 else [(n - r) / (n - 1) for r in ranks],
            "wc": scores,
            "borda": [(n - r + 1) ** 0.7 for r in ranks],
        }
        for method, w in weights.items():
            votes = {}
            for a, wi in zip(answers, w):
                votes[a] = votes.get(a, 0.0) + wi
            best = max(votes.values())
            tied = [a for a in votes if abs(votes[a] - best) <= 1e-9]
            expected = min(tied, key=answers.index)
            kw = {"p": 0.7} if method == "borda" else {}
            got = aggregate(answers, method, scores, **kw)
            assert got.answer == expected, (method, answers, scores)


def test_hms_picks_view_stable_minority_where_majority_picks_fragile():
    # original view: fragile W is the plurality (6/16) over correct C (5/16);
    # reframed view: W collapses to 1/16 while C stays at 5/16.
    orig = ["W"] * 6 + ["C"] * 5 + ["X"] * 3 + [NO_ANSWER] * 2
    refr = ["C"] * 5 + ["W"] * 1 + ["Y"] * 4 + ["Z"] * 4 + ["X"] * 2
    assert aggregate(orig, "majority").answer == "W"
    d = harmonic_mean_select(orig, refr)
    assert d.answer == "C"
    # HM(C) = 2 * (5/16) * (5/16) / (10/16) = 5/16, HM(W) = 2 * (6/16)(1/16) / (7/16) = 12/112
    assert d.support["C"] == pytest.approx(5 / 16)
    assert d.support["W"] == pytest.approx(12 / 112)
    assert "Y" not in d.support  # must appear in both views


def test_hms_ties_prefer_higher_total_count_then_earliest():
    # (n0, n1) = (3, 6) and (4, 4) have the same harmonic mean when both views have N = 12
    orig = ["P"] * 3 + ["Q"] * 4 + ["R"] * 5
    refr = ["P"] * 6 + ["Q"] * 4 + ["S"] * 2
    d = harmonic_mean_select(orig, refr)
    assert d.support["P"] == d.support["Q"]
    assert d.answer == "P"  # total 9 > 8
    d2 = harmonic_mean_select(["Q", "P"], ["P", "Q"])
    assert d2.answer == "Q"  # equal HM and totals: earliest in the original view


def test_hms_no_common_answer_and_laplace():
    d = harmonic_mean_select(["A", "A"], ["B", NO_ANSWER])
    assert d.answer is None and d.abstain
    d = harmonic_mean_select(["A", "A"], ["B", NO_ANSWER], laplace=True)
    assert d.answer == "A" and not d.abstain


def test_dual_view_majority():
    d = dual_view_majority(["A", "B", "B"], ["A", "A", "B"])
    assert d.support == {"A": 3.0, "B": 3.0}
    assert d.answer == "A"


def test_vote_margin_and_delta_abstention():
    assert vote_margin({"A": 3.0, "B": 1.0}) == pytest.approx(0.5)
    assert vote_margin({"A": 2.0}) == 1.0
    d = aggregate(["A", "A", "A", "B"], "majority", delta=0.6)
    assert d.margin == pytest.approx(0.5) and d.abstain
    assert not aggregate(["A", "A", "A", "B"], "majority", delta=0.4).abstain
    with pytest.raises(ValueError):
        aggregate(["A", "B"], "top1", [1.0, 2.0], delta=0.1)


def test_conformal_threshold_and_sets_hand_worked():
    # nonconformity 1 - s: [0.1, 0.2, 0.4, 0.5, 0.9]; n = 5, alpha = 0.2: k = ceil(6 * 0.8) = 5 -> 0.9
    gold = [0.9, 0.8, 0.6, 0.5, 0.1]
    assert conformal_threshold(gold, alpha=0.2) == pytest.approx(0.9)
    # alpha = 0.5: k = ceil(3) = 3 -> third smallest = 0.4
    assert conformal_threshold(gold, alpha=0.5) == pytest.approx(0.4)
    assert conformal_threshold(gold, alpha=0.01) == float("inf")
    assert conformal_set({"A": 7.0, "B": 3.0}, 0.4) == ["A"]
    assert conformal_set({"A": 7.0, "B": 3.0}, 0.75) == ["A", "B"]
    d = aggregate(["A"] * 7 + ["B"] * 3, "majority", conformal_qhat=0.75)
    assert d.prediction_set == ["A", "B"] and d.abstain
    d = aggregate(["A"] * 7 + ["B"] * 3, "majority", conformal_qhat=0.4)
    assert d.prediction_set == ["A"] and not d.abstain
    with pytest.raises(ValueError):
        conformal_threshold([], 0.1)
    with pytest.raises(ValueError):
        conformal_threshold([0.5, 1.5], 0.1)


def test_conformal_coverage_on_synthetic_questions():
    """Split conformal guarantees >= 1 - alpha coverage of the gold answer on exchangeable questions."""
    g = torch.Generator().manual_seed(0)
    def question():
        p_correct = torch.rand(1, generator=g).item()
        labels = ["gold" if torch.rand(1, generator=g).item() < p_correct
                  else f"w{int(torch.randint(0, 3, (1,), generator=g))}" for _ in range(16)]
        return aggregate(labels, "majority").support
    cal = [question() for _ in range(400)]
    test = [question() for _ in range(400)]
    alpha = 0.2
    qhat = conformal_threshold([s.get("gold", 0.0) / sum(s.values()) for s in cal], alpha)
    covered = sum("gold" in conformal_set(s, qhat) for s in test) / len(test)
    assert covered >= 1 - alpha - 0.05

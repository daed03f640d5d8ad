"""Loss functions against naive loops and hand-worked numbers."""
import math

import pytest
import torch

from ttrl_lightning.modules.losses import (
    action_weighted_ce,
    action_weighted_nll,
    clipped_policy_loss,
    completion_logprobs,
    feedback_dropout,
    group_advantages,
    k3_kl,
    seq_mean,
    token_mean,
)


def test_action_weighted_ce_matches_naive_loop():
    torch.manual_seed(0)
    B, T, V = 2, 6, 5
    logits = torch.randn(B, T, V)
    labels = torch.tensor([[-100, -100, 3, 1, 4, -100], [-100, 2, 2, 0, -100, -100]])
    action = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 1, 0, 0, 0]], dtype=torch.bool)
    loss, stats = action_weighted_ce(logits, labels, action, w_act=2.0)
    num, den = 0.0, 0.0
    for b in range(B):
        for t in range(1, T):
            y = int(labels[b, t])
            if y == -100:
                continue
            p = torch.softmax(logits[b, t - 1].double(), 0)
            ce = -math.log(float(p[y]))
            w = 2.0 if action[b, t] else 1.0
            num += w * ce
            den += w
    assert loss.item() == pytest.approx(num / den, rel=1e-5)
    # with w_act = 1 it is the plain mean CE over label tokens (torch's own cross_entropy)
    plain, _ = action_weighted_ce(logits, labels, action, w_act=1.0)
    ref = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
    assert plain.item() == pytest.approx(ref.item(), rel=1e-5)
    assert loss.item() != pytest.approx(plain.item(), rel=1e-4)  # the weighting changes the loss
    assert stats["ce_action"] > 0 and stats["ce_text"] > 0


def test_action_weighted_nll_is_the_ce_of_the_label_logprobs():
    """From the labels' log-probs (garbage where there is no label: not read) the loss, its gradient and
    the text/action CE equal action_weighted_ce's from the logits."""
    torch.manual_seed(1)
    B, T, V = 2, 6, 5
    logits = torch.randn(B, T, V, requires_grad=True)
    labels = torch.tensor([[-100, -100, 3, 1, 4, -100], [-100, 2, 2, 0, -100, -100]])
    action = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 1, 0, 0, 0]], dtype=torch.bool)
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, labels[:, 1:].clamp(min=0)[..., None])[..., 0]
    logp = torch.where(labels[:, 1:] == -100, torch.full_like(logp, 123.0), logp)
    loss, stats = action_weighted_nll(logp, labels, action, w_act=2.5)
    ref, ref_stats = action_weighted_ce(logits, labels, action, w_act=2.5)
    torch.testing.assert_close(loss, ref)
    for k in ref_stats:
        torch.testing.assert_close(stats[k], ref_stats[k])
    (g,) = torch.autograd.grad(loss, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g, g_ref)
    with pytest.raises(ValueError, match=r"label_logprobs \(2, 6\) \[B,T-1\]"):
        action_weighted_nll(torch.zeros(B, T), labels, action)


def test_action_weighted_ce_rejects_bad_input():
    with pytest.raises(ValueError, match="no label"):
        action_weighted_ce(torch.zeros(1, 3, 4), torch.full((1, 3), -100),
                           torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="shapes"):
        action_weighted_ce(torch.zeros(1, 3, 4), torch.zeros(1, 2, dtype=torch.long),
                           torch.zeros(1, 2, dtype=torch.bool))


def test_feedback_dropout_hides_whole_spans_only():
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    span = torch.tensor([[0, 1, 1, 0, 2, 2, 2, 0]])
    assert torch.equal(feedback_dropout(ids, span, 0.0, 99, None), ids)
    assert feedback_dropout(ids, span, 1.0, 99, None).tolist() == [[5, 99, 99, 8, 99, 99, 99, 12]]
    g = torch.Generator().manual_seed(0)
    hidden_1 = hidden_2 = 0
    n = 4000
    for _ in range(n):
        out = feedback_dropout(ids, span, 0.3, 99, g)[0]
        assert out[[0, 3, 7]].tolist() == [5, 8, 12]  # non-output tokens never touched
        s1, s2 = out[1:3] == 99, out[4:7] == 99
        assert s1.all() or not s1.any()  # a span is hidden as a whole
        assert s2.all() or not s2.any()
        hidden_1 += int(s1.all())
        hidden_2 += int(s2.all())
    # binomial(4000, 0.3): sd ~ 29, so +-120 is > 4 sd
    assert abs(hidden_1 - 0.3 * n) < 120 and abs(hidden_2 - 0.3 * n) < 120
    # same generator seed, same draws
    a = feedback_dropout(ids, span, 0.5, 99, torch.Generator().manual_seed(3))
    b = feedback_dropout(ids, span, 0.5, 99, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_group_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    a = group_advantages(r)
    std = math.sqrt(((0.5 ** 2) * 4) / 3)  # sample std of [1, 0, 0, 1]
    assert a[0].tolist() == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 1 + [-0.5 / (std + 1e-4),
                                          0.5 / (std + 1e-4)], rel=1e-6)
    assert a[1].tolist() == [0.0] * 4
    assert group_advantages(r, scale=False)[0].tolist() == [0.5, -0.5, -0.5, 0.5]
    with pytest.raises(ValueError, match="NaN"):
        group_advantages(torch.tensor([[float("nan"), 1.0]]))


def test_clipped_policy_loss_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    old = torch.zeros(1, 3)
    loss, clipped = clipped_policy_loss(logp, old, torch.tensor([2.0]), 0.2, 0.2)
    # ratios 1.5, 0.5, 1.1 with A = 2: min(r A, clip(r) A) = 2.4, 1.0, 2.2
    assert loss[0].tolist() == pytest.approx([-2.4, -1.0, -2.2], rel=1e-6)
    assert clipped[0].tolist() == [True, False, False]
    loss, _ = clipped_policy_loss(logp, old, torch.tensor([-1.0]), 0.2, 0.2)
    # A = -1: min(-r, -clip(r)) = -1.5, -0.8, -1.1
    assert loss[0].tolist() == pytest.approx([1.5, 0.8, 1.1], rel=1e-6)


def test_k3_is_unbiased_kl_estimate():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(6), 0)
    q = torch.softmax(torch.randn(6), 0)
    exact = float((p * (p.log() - q.log())).sum())
    x = torch.multinomial(p, 200_000, replacement=True)
    est = k3_kl(p.log()[x], q.log()[x])
    assert (est >= 0).all()
    assert est.mean().item() == pytest.approx(exact, rel=0.03)
    assert k3_kl(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0.0


def test_aggregations_and_logprobs():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert token_mean(x, m).item() == pytest.approx(7 / 3)
    assert seq_mean(x, m).item() == pytest.approx((1.5 + 4.0) / 2)
    # a row without a masked token (an abstained group's row) is left out of the mean, not averaged as 0
    x3, m3 = torch.cat([x, torch.full((1, 3), 5.0)]), torch.cat([m, torch.zeros(1, 3)])
    assert seq_mean(x3, m3).item() == pytest.approx((1.5 + 4.0) / 2)
    assert token_mean(x3, m3).item() == pytest.approx(7 / 3)
    assert seq_mean(x, torch.zeros_like(m)).item() == 0.0
    logits = torch.randn(2, 3, 7)
    ids = torch.randint(0, 7, (2, 3))
    ref = torch.log_softmax(logits, -1).gather(-1, ids[..., None])[..., 0]
    torch.testing.assert_close(completion_logprobs(logits, ids), ref)


def test_truncated_importance_weights_equal_the_formula_token_by_token():
    from ttrl_lightning.modules.losses import truncated_importance_weights

    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g) * 3
    sampler = logp + torch.randn(3, 5, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]).bool()
    sampler = torch.where(mask, sampler, float("nan"))  # the engines' padding
    w, gap = truncated_importance_weights(logp, sampler, mask, cap=2.0)
    diffs = []
    for r in range(3):
        for t in range(5):
            if mask[r, t]:
                d = float(logp[r, t]) - float(sampler[r, t])
                assert float(w[r, t]) == pytest.approx(min(math.exp(d), 2.0), rel=1e-6)
                diffs.append(abs(d))
            else:
                assert float(w[r, t]) == 1.0
    assert float(gap) == pytest.approx(sum(diffs) / len(diffs), rel=1e-6)
    assert (w <= 2.0).all() and (w == 2.0).any() and not w.requires_grad
    none, gap2 = truncated_importance_weights(logp, sampler, mask, cap=None)
    assert none is None and float(gap2) == float(gap)
    _, empty = truncated_importance_weights(logp, sampler, torch.zeros_like(mask), cap=2.0)
    assert float(empty) == 0.0
    with pytest.raises(ValueError, match="NaN or inf"):
        truncated_importance_weights(logp, torch.full_like(logp, float("nan")), mask)
    with pytest.raises(ValueError, match="shapes"):
        truncated_importance_weights(logp, sampler[:, :4], mask)

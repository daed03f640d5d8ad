"""Dawid--Skene EM: checked against crowd-kit's DawidSkene and against a naive per-item Python-loop EM."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from ttrl_lightning.consensus.dawid_skene import dawid_skene, dawid_skene_reliability, rollout_annotator_labels


def _simulate(seed, items, annotators, classes, missing=0.0):
    """Labels from annotators with varied accuracy (some near chance), optional missing entries (-1)."""
    g = torch.Generator().manual_seed(seed)
    truth = torch.randint(0, classes, (items,), generator=g)
    accuracy = torch.rand(annotators, generator=g) * 0.7 + 0.25  # 0.25 .. 0.95
    noise = torch.randint(0, classes, (items, annotators), generator=g)
    correct = torch.rand(items, annotators, generator=g) < accuracy
    labels = torch.where(correct, truth[:, None], noise)
    if missing:
        drop = torch.rand(items, annotators, generator=g) < missing
        drop[:, 0] &= ~drop.all(dim=1)  # every item keeps at least one label
        labels = labels.masked_fill(drop, -1)
    return labels, truth


def _crowdkit(labels, n_iter):
    from crowdkit.aggregation import DawidSkene

    task, worker = (labels >= 0).nonzero(as_tuple=True)
    df = pd.DataFrame({"task": task.numpy(), "worker": worker.numpy(), "label": labels[task, worker].numpy()})
    ds = DawidSkene(n_iter=n_iter, tol=-math.inf)  # never stops early: exactly n_iter iterations
    ds.fit(df)
    items, annotators = labels.shape
    classes = sorted(ds.probas_.columns)
    probas = ds.probas_.loc[list(range(items)), classes].to_numpy()
    # errors_.loc[(worker, observed), true]; absent (worker, observed) pairs were never given: 0
    errors = np.zeros((annotators, len(classes), len(classes)))
    for (w, observed), row in ds.errors_.iterrows():
        errors[w, :, classes.index(observed)] = row[classes].to_numpy()
    return torch.tensor(probas, dtype=torch.float64), torch.from_numpy(errors)


CROWDKIT_CASES = [
    dict(seed=0, items=120, annotators=8, classes=4),
    dict(seed=1, items=100, annotators=5, classes=3),
    dict(seed=2, items=80, annotators=12, classes=5),
    dict(seed=3, items=150, annotators=10, classes=4, missing=0.4),
]


@pytest.mark.parametrize("case", CROWDKIT_CASES, ids=lambda c: f"seed{c['seed']}")
def test_matches_crowdkit(case):
    """Same algorithm when configured alike: smoothing=0 (crowd-kit only clips counts to 1e-10), no early stop.

    crowd-kit with n_iter=n returns the E-step under the (n-1)-th M-step and the n-th M-step's errors; ours
    with max_iter=K returns the K-th M-step and the E-step under it, so ours(K) pairs with crowd-kit's
    errors at n=K and probas at n=K+1. Tolerances (absolute): posteriors 1e-8 (crowd-kit clips its returned
    probas to >= 1e-10 in place when computing its ELBO; measured max difference 1.0e-10), confusion 1e-10
    (measured 2.2e-16). crowd-kit starts from the soft majority vote, i.e. ``init="soft"``; the default
    (the paper's hard-majority, smoothed-identity start) and the former ``smoothing=1e-2`` are different
    estimators, and the test tells them apart.
    """
    labels, truth = _simulate(**case)
    classes = case["classes"]
    iters = 12
    post, conf, prior = dawid_skene(labels, classes, max_iter=iters, tol=0.0, smoothing=0.0, init="soft")
    ck_probas, _ = _crowdkit(labels, iters + 1)
    _, ck_errors = _crowdkit(labels, iters)
    assert torch.equal(post.argmax(-1), ck_probas.argmax(-1))
    torch.testing.assert_close(post, ck_probas, atol=1e-8, rtol=0)
    given = torch.zeros_like(conf, dtype=torch.bool)  # entries crowd-kit defines: labels annotator j gave
    for j in range(labels.shape[1]):
        seen = labels[:, j][labels[:, j] >= 0].unique()
        given[j][:, seen] = True
    torch.testing.assert_close(conf[given], ck_errors[given], atol=1e-10, rtol=0)
    # the smoothed soft start and the paper's default start are different estimators: they fail the check
    smoothed, _, _ = dawid_skene(labels, classes, max_iter=iters, tol=0.0, smoothing=1e-2, init="soft")
    assert (smoothed - ck_probas).abs().max() > 1e-6
    _, paper_conf, _ = dawid_skene(labels, classes, max_iter=1, tol=0.0)  # the starts differ
    _, ck_errors_1 = _crowdkit(labels, 1)
    assert (paper_conf[given] - ck_errors_1[given]).abs().max() > 1e-3
    # and the model is sensible: better than chance against the simulated truth
    assert (post.argmax(-1) == truth).float().mean() > 0.8


# ------------------------------------------------------------------------------------ naive reference
def _naive_em(labels, classes, max_iter=50, tol=1e-6, smoothing=0.0, init="majority", eps=1e-2):
    """Independent per-item Python-loop implementation of the documented updates (pure floats)."""
    rows = labels.tolist()
    n, m = len(rows), len(rows[0])

    def m_step(post):
        prior = [max(sum(post[i][c] for i in range(n)) / n, 1e-10) for c in range(classes)]
        conf = []
        for j in range(m):
            mat = []
            for c in range(classes):
                counts = [smoothing] * classes
                for i in range(n):
                    if rows[i][j] >= 0:
                        counts[rows[i][j]] += post[i][c]
                counts = [max(x, 1e-10) for x in counts]
                total = sum(counts)
                mat.append([x / total for x in counts])
            conf.append(mat)
        return prior, conf

    def e_step(prior, conf):
        post, ll = [], 0.0
        for i in range(n):
            scores = []
            for c in range(classes):
                s = math.log(prior[c])
                for j in range(m):
                    if rows[i][j] >= 0:
                        s += math.log(conf[j][c][rows[i][j]])
                scores.append(s)
            top = max(scores)
            z = top + math.log(sum(math.exp(s - top) for s in scores))
            post.append([math.exp(s - z) for s in scores])
            ll += z
        return post, ll

    post = []
    for i in range(n):
        votes = [0.0] * classes
        for j in range(m):
            if rows[i][j] >= 0:
                votes[rows[i][j]] += 1
        if init == "soft":
            post.append([v / sum(votes) for v in votes])
        else:  # hard majority, ties split evenly
            tied = [c for c in range(classes) if votes[c] == max(votes)]
            post.append([1 / len(tied) if c in tied else 0.0 for c in range(classes)])
    if init == "soft":
        prior, conf = m_step(post)
    else:
        prior = [max(sum(post[i][c] for i in range(n)) / n, 1e-10) for c in range(classes)]
        row = lambda c: [((c == l) + eps) / (1 + classes * eps) for l in range(classes)]  # noqa: E731
        conf = [[row(c) for c in range(classes)] for _ in range(m)]
    post, ll = e_step(prior, conf)
    it = 0
    for _ in range(max_iter):
        prior, conf = m_step(post)
        post, new_ll = e_step(prior, conf)
        it += 1
        done = new_ll - ll < tol * abs(ll)
        ll = new_ll
        if done:
            break
    return torch.tensor(post, dtype=torch.float64), torch.tensor(conf, dtype=torch.float64), \
        torch.tensor(prior, dtype=torch.float64), it, ll


@pytest.mark.parametrize("seed, missing", [(10, 0.0), (11, 0.3), (12, 0.5)])
def test_defaults_match_naive_loop(seed, missing):
    labels, _ = _simulate(seed, items=25, annotators=6, classes=3, missing=missing)
    post, conf, prior, info = dawid_skene(labels, 3, return_info=True)
    ref_post, ref_conf, ref_prior, ref_iters, ref_ll = _naive_em(labels, 3)
    assert int(info["iterations"]) == ref_iters
    assert ref_iters < 50  # the tolerance, not the cap, stopped it
    torch.testing.assert_close(post, ref_post, atol=1e-9, rtol=0)
    torch.testing.assert_close(conf, ref_conf, atol=1e-9, rtol=0)
    torch.testing.assert_close(prior, ref_prior, atol=1e-9, rtol=0)
    assert math.isclose(float(info["log_likelihood"]), ref_ll, rel_tol=1e-10)


@pytest.mark.parametrize("seed, missing", [(14, 0.0), (15, 0.3)])
def test_soft_init_matches_naive_loop(seed, missing):
    labels, _ = _simulate(seed, items=25, annotators=6, classes=3, missing=missing)
    post, conf, prior, info = dawid_skene(labels, 3, smoothing=1e-2, init="soft", return_info=True)
    ref_post, ref_conf, ref_prior, ref_iters, _ = _naive_em(labels, 3, smoothing=1e-2, init="soft")
    assert int(info["iterations"]) == ref_iters < 50
    torch.testing.assert_close(post, ref_post, atol=1e-9, rtol=0)
    torch.testing.assert_close(conf, ref_conf, atol=1e-9, rtol=0)
    # and the paper's start is not the soft one
    assert (dawid_skene(labels, 3, max_iter=1, tol=0.0)[1] - dawid_skene(labels, 3, max_iter=1, tol=0.0,
                                                                          init="soft")[1]).abs().max() > 1e-3


def test_paper_init_by_hand():
    """One item, labels (0, 0, 1), C = 2, eps = 0.01: prior (1, 0) from the hard majority label, every
    confusion [[1.01, 0.01], [0.01, 1.01]] / 1.02; then one M-step on the E-step's posterior."""
    labels = torch.tensor([[0, 0, 1]])
    post, conf, prior = dawid_skene(labels, 2, max_iter=1, tol=0.0)
    # E-step under the init: prior[1] is floored at 1e-10, so T = (1 - ~1e-10 * (1.01 / 0.01)^-1 ..., ~0)
    a, b = 1.01 / 1.02, 0.01 / 1.02
    s0, s1 = math.log(1.0) + 2 * math.log(a) + math.log(b), math.log(1e-10) + 2 * math.log(b) + math.log(a)
    t0 = 1 / (1 + math.exp(s1 - s0))
    # M-step (smoothing 0): prior = T; annotators 0, 1 said 0 -> row 0 = (1, 0) (floored), row 1 = (1, 0);
    # annotator 2 said 1 -> row 0 = (0, 1), row 1 = (0, 1)
    want_prior = torch.tensor([t0, max(1 - t0, 1e-10)], dtype=torch.float64)  # the 1e-10 floor
    torch.testing.assert_close(prior, want_prior, atol=1e-12, rtol=0)
    torch.testing.assert_close(conf[2, 0], torch.tensor([1e-10 / (t0 + 1e-10), t0 / (t0 + 1e-10)],
                                                        dtype=torch.float64), atol=1e-12, rtol=0)
    assert post[0, 0] > 0.999999
    # a tie splits the hard label: prior (1/2, 1/2), and the smoothed-identity E-step keeps the item at 1/2
    post_tie, _, prior_tie = dawid_skene(torch.tensor([[0, 1]]), 2, max_iter=1, tol=0.0)
    torch.testing.assert_close(post_tie, torch.tensor([[0.5, 0.5]], dtype=torch.float64), atol=1e-12, rtol=0)


def test_rollout_annotator_labels_by_hand():
    labels, classes = rollout_annotator_labels([["7", "5", "7", None], ["x", "y", "y", "z"], ["k"]])
    assert classes == 3
    assert labels.tolist() == [[0, 1, 0, -1], [1, 0, 0, 2], [0, -1, -1, -1]]  # ties: first appearance
    labels, classes = rollout_annotator_labels([["x", "y", "y", "z"]], max_classes=2)
    assert classes == 2 and labels.tolist() == [[1, 0, 0, -1]]
    with pytest.raises(ValueError, match="empty"):
        rollout_annotator_labels([])
    with pytest.raises(ValueError, match="max_classes"):
        rollout_annotator_labels([["a"]], max_classes=0)


def test_planted_unreliable_rollout_slot_gets_lower_reliability():
    """Items = 60 queries, annotators = 6 rollout slots; slot 5 is a broken sampler that answers a wrong
    answer every time: its prior-weighted r_j is the lowest, and the labels follow the reliable slots."""
    g = torch.Generator().manual_seed(40)
    answers, truth = [], []
    for q in range(60):
        right = f"a{q}"
        wrong = [f"w{q}_{k}" for k in range(3)]
        row = []
        for j in range(6):
            u = float(torch.rand(1, generator=g))
            if j < 5 and u < 0.75:
                row.append(right)
            elif j < 5 and u < 0.85:
                row.append(None)  # unextractable
            else:
                row.append(wrong[int(torch.randint(0, 3, (1,), generator=g))])
        answers.append(row)
        truth.append(right)
    labels, classes = rollout_annotator_labels(answers)
    post, conf, prior = dawid_skene(labels, classes)
    r = dawid_skene_reliability(conf, prior)
    assert r[5] < 0.1 and r[:5].min() > 0.7
    right_rank = torch.tensor([labels[q][[a == truth[q] for a in answers[q]]][0] for q in range(60)])
    ds_accuracy = (post.argmax(-1) == right_rank).float().mean()
    assert ds_accuracy >= 0.9  # (majority vote, rank 0, gets 59/60 here; DS 57/60)


def test_iteration_cap_matches_naive_loop():
    labels, _ = _simulate(13, items=20, annotators=5, classes=4, missing=0.2)
    post, conf, prior, info = dawid_skene(labels, 4, max_iter=3, tol=0.0, return_info=True)
    ref_post, ref_conf, _, ref_iters, _ = _naive_em(labels, 4, max_iter=3, tol=0.0)
    assert int(info["iterations"]) == ref_iters == 3
    torch.testing.assert_close(post, ref_post, atol=1e-9, rtol=0)
    torch.testing.assert_close(conf, ref_conf, atol=1e-9, rtol=0)


def test_batched_equals_one_call_per_problem():
    problems = [_simulate(20 + b, items=16, annotators=8, classes=5, missing=0.25)[0] for b in range(6)]
    batch = torch.stack(problems)
    post, conf, prior, info = dawid_skene(batch, 5, return_info=True)
    assert post.shape == (6, 16, 5) and conf.shape == (6, 8, 5, 5) and prior.shape == (6, 5)
    iters = []
    for b, labels in enumerate(problems):
        p, c, pr, inf = dawid_skene(labels, 5, return_info=True)
        torch.testing.assert_close(post[b], p, atol=1e-12, rtol=0)
        torch.testing.assert_close(conf[b], c, atol=1e-12, rtol=0)
        torch.testing.assert_close(prior[b], pr, atol=1e-12, rtol=0)
        assert int(info["iterations"][b]) == int(inf["iterations"])
        iters.append(int(inf["iterations"]))
    assert len(set(iters)) > 1  # problems really stopped at different iterations


def test_outputs_are_distributions():
    labels, _ = _simulate(30, items=40, annotators=7, classes=4, missing=0.3)
    post, conf, prior = dawid_skene(labels, 4)
    torch.testing.assert_close(post.sum(-1), torch.ones(40, dtype=torch.float64))
    torch.testing.assert_close(conf.sum(-1), torch.ones(7, 4, dtype=torch.float64))
    torch.testing.assert_close(prior.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert (post >= 0).all() and (conf > 0).all()
    post32, _, _ = dawid_skene(labels, 4, dtype=torch.float32)
    assert post32.dtype == torch.float32
    torch.testing.assert_close(post32.double(), post, atol=1e-4, rtol=0)


def test_int32_labels_and_silent_annotator():
    labels, _ = _simulate(33, items=30, annotators=5, classes=3)
    labels[:, 4] = -1  # annotator 4 labelled nothing
    post, conf, _ = dawid_skene(labels.int(), 3)
    ref_post, ref_conf, *_ = _naive_em(labels, 3)
    torch.testing.assert_close(post, ref_post, atol=1e-9, rtol=0)
    torch.testing.assert_close(conf[4], torch.full((3, 3), 1 / 3, dtype=torch.float64))
    torch.testing.assert_close(dawid_skene_reliability(conf)[4], torch.tensor(1 / 3, dtype=torch.float64))


def test_many_annotators_no_underflow():
    # 3000 annotators: the product of per-annotator likelihoods underflows in probability space
    labels, truth = _simulate(31, items=10, annotators=3000, classes=3)
    post, conf, _ = dawid_skene(labels, 3)
    assert torch.isfinite(post).all() and torch.isfinite(conf).all()
    torch.testing.assert_close(post.sum(-1), torch.ones(10, dtype=torch.float64))
    assert torch.equal(post.argmax(-1), truth)


def test_recovers_reliable_and_adversarial_annotators():
    # 3 careful annotators, 1 always says 0, 1 uniformly random: reliability orders them
    g = torch.Generator().manual_seed(32)
    truth = torch.randint(0, 3, (300,), generator=g)
    careful = torch.stack([torch.where(torch.rand(300, generator=g) < 0.9, truth,
                                       torch.randint(0, 3, (300,), generator=g)) for _ in range(3)], 1)
    labels = torch.cat([careful, torch.zeros(300, 1, dtype=torch.long),
                        torch.randint(0, 3, (300, 1), generator=g)], 1)
    post, conf, _ = dawid_skene(labels, 3)
    r = dawid_skene_reliability(conf)
    assert (post.argmax(-1) == truth).float().mean() > 0.95
    assert r[:3].min() > 0.85 and r[3] < 0.5 and r[4] < 0.5
    torch.testing.assert_close(conf[3][:, 0], torch.ones(3, dtype=torch.float64), atol=1e-3, rtol=0)


# ------------------------------------------------------------------------------------ reliability
def test_prior_weighted_reliability_by_hand():
    conf = torch.tensor([[[0.9, 0.1], [0.2, 0.8]], [[0.5, 0.5], [0.0, 1.0]]], dtype=torch.float64)
    prior = torch.tensor([3.0, 1.0], dtype=torch.float64)  # normalised to (0.75, 0.25)
    torch.testing.assert_close(dawid_skene_reliability(conf, prior),
                               torch.tensor([0.75 * 0.9 + 0.25 * 0.8, 0.75 * 0.5 + 0.25 * 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="prior must be a tensor of shape"):
        dawid_skene_reliability(conf, torch.ones(3))
    with pytest.raises(ValueError, match="prior must be finite"):
        dawid_skene_reliability(conf, torch.tensor([1.0, -1.0]))


def test_reliability_formula_by_hand():
    conf = torch.tensor([
        [[0.9, 0.1], [0.2, 0.8]],  # (0.9 + 0.8) / 2 = 0.85
        [[0.5, 0.5], [0.5, 0.5]],  # 0.5
        [[0.0, 1.0], [1.0, 0.0]],  # 0.0
    ])
    torch.testing.assert_close(dawid_skene_reliability(conf), torch.tensor([0.85, 0.5, 0.0]))
    batched = torch.stack([conf, conf.flip(0)])
    assert dawid_skene_reliability(batched).shape == (2, 3)


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.ones(3, 2), "annotators, C, C"),
        (torch.ones(2, 3, 2), "annotators, C, C"),
        (torch.ones(2, 2, 2, dtype=torch.long), "floating"),
        (torch.full((1, 2, 2), float("nan")), "NaN"),
    ],
)
def test_reliability_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        dawid_skene_reliability(bad)


# ------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "labels, classes, match",
    [
        (torch.tensor([[0, 3]]), 3, "< num_classes=3"),
        (torch.tensor([[0, -2]]), 3, ">= -1"),
        (torch.tensor([[0, 1], [-1, -1]]), 3, "at least one label"),
        (torch.tensor([[[0, 1]], [[-1, -1]]]), 3, "at least one label"),
        (torch.tensor([[0.0, 1.0]]), 3, "integer dtype"),
        (torch.tensor([[True, False]]), 3, "integer dtype"),
        (torch.zeros(0, 4, dtype=torch.long), 3, "empty"),
        (torch.zeros(4, dtype=torch.long), 3, "shape"),
        (torch.zeros(1, 1, 1, 1, dtype=torch.long), 3, "shape"),
        (torch.tensor([[0, 1]]), 0, "num_classes"),
    ],
)
def test_bad_labels(labels, classes, match):
    with pytest.raises(ValueError, match=match):
        dawid_skene(labels, classes)


def test_bad_hyperparameters_and_types():
    labels = torch.tensor([[0, 1]])
    with pytest.raises(ValueError, match="max_iter"):
        dawid_skene(labels, 2, max_iter=0)
    with pytest.raises(ValueError, match="tol"):
        dawid_skene(labels, 2, tol=-1.0)
    with pytest.raises(ValueError, match="smoothing"):
        dawid_skene(labels, 2, smoothing=float("nan"))
    with pytest.raises(ValueError, match="eps"):
        dawid_skene(labels, 2, eps=-1.0)
    with pytest.raises(ValueError, match="init must be one of"):
        dawid_skene(labels, 2, init="random")
    with pytest.raises(TypeError, match="torch.Tensor"):
        dawid_skene([[0, 1]], 2)

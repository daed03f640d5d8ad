"""The study's statistics (ttrl_lightning/study/stats.py) on hand-made data: the bootstrap's point estimate is the
plain mean, a known effect is found (power), a null effect is found about alpha of the time over repeated
synthetic draws (calibration), Holm agrees with the textbook procedure, and the gold share is a ratio of means."""
import numpy as np
import pytest

from ttrl_lightning.study.stats import (bootstrap_means, compare, gold_share, holm, paired_grid)


def _draw(rng, q=64, s=3, effect=0.0, k=8, seed_sd=0.02):
    """Per-question accuracies of an arm and a reference on q questions x s seeds: each question has its own
    difficulty, each (arm, seed) run a small shift, each cell k binomial samples; ``effect`` shifts the arm."""
    base = rng.uniform(0.1, 0.9, size=q)
    ref_shift = rng.normal(0, seed_sd, size=s)
    arm_shift = rng.normal(0, seed_sd, size=s)
    p_ref = np.clip(base[:, None] + ref_shift[None, :], 0, 1)
    p_arm = np.clip(base[:, None] + effect + arm_shift[None, :], 0, 1)
    return rng.binomial(k, p_arm) / k, rng.binomial(k, p_ref) / k


def test_point_estimate_is_the_mean_and_bootstrap_is_centred_on_it():
    rng = np.random.default_rng(1)
    a, b = _draw(rng)
    c = compare(a - b, n_boot=2000)
    assert c.mean == pytest.approx(float((a - b).mean()))
    assert c.low <= c.mean <= c.high and c.questions == 64 and c.replicates == 3
    assert bootstrap_means(a - b, 2000).mean() == pytest.approx(c.mean, abs=0.01)
    # fixed bootstrap seed: the same interval every time
    assert compare(a - b, n_boot=2000) == c


def test_a_known_effect_is_found():
    rng = np.random.default_rng(2)
    found = 0
    for _ in range(40):
        a, b = _draw(rng, effect=0.12)
        found += compare(a - b, n_boot=1000).low > 0
    assert found >= 36  # power >= 0.9 at +12 points on 64 questions x 3 seeds


def test_a_null_effect_is_found_about_alpha_of_the_time():
    rng = np.random.default_rng(3)
    draws = 300
    rejected = sum(compare(np.subtract(*_draw(rng)), n_boot=1000, seed=i).p < 0.05 for i in range(draws))
    # alpha = 0.05: 15 of 300 expected; the binomial 99.9% range is about 4-30
    assert 3 <= rejected <= 30, rejected
    # the interval and the p-value agree: an interval that excludes 0 goes with p < alpha, nearly always
    rng = np.random.default_rng(4)
    agree = 0
    for i in range(100):
        c = compare(np.subtract(*_draw(rng, effect=0.05)), n_boot=1000, seed=i)
        agree += (c.low > 0 or c.high < 0) == (c.p < 0.05)
    assert agree >= 95


def test_holm_matches_the_textbook_procedure():
    rng = np.random.default_rng(5)
    grids = {name: np.subtract(*_draw(rng, effect=e)) for name, e in (("a", 0.15), ("b", 0.0), ("c", 0.04))}
    raw = {name: compare(g, n_boot=2000) for name, g in grids.items()}
    adjusted = holm(raw, grids, n_boot=2000)
    ps = sorted((c.p, name) for name, c in raw.items())
    m, running = len(ps), 0.0
    for i, (p, name) in enumerate(ps):
        running = max(running, min(1.0, (m - i) * p))
        assert adjusted[name].p_adjusted == pytest.approx(running)
    # the adjusted (simultaneous) interval is wider than the plain one
    for name in grids:
        assert adjusted[name].adjusted_low <= raw[name].low and adjusted[name].adjusted_high >= raw[name].high
    assert adjusted["a"].improves is True and adjusted["b"].improves is False
    assert raw["a"].improves is None  # not adjusted yet


def test_gold_share_is_the_ratio_of_mean_gains():
    rng = np.random.default_rng(6)
    q, s = 128, 3
    start = rng.uniform(0.2, 0.6, size=(q, s))
    gold = np.clip(start + 0.2 + rng.normal(0, 0.1, size=(q, s)), 0, 1)
    arm = np.clip(start + 0.1 + rng.normal(0, 0.1, size=(q, s)), 0, 1)
    share = gold_share(arm - start, gold - start, n_boot=2000)
    assert share["share"] == pytest.approx((arm - start).mean() / (gold - start).mean())
    assert share["low"] < share["share"] < share["high"] and 0.3 < share["share"] < 0.7
    # gold no better than the start: the share is undefined, not a huge or negative number
    assert gold_share(arm - start, rng.normal(0, 0.1, size=(q, s)), n_boot=2000) is None


def test_paired_grid_pairs_replicates_by_name_and_refuses_mismatches():
    grid, shared = paired_grid({"0": [1, 0.5], "1": [0, 0], "2": [1, 1]}, {"1": [0.5, 0.5], "0": [0, 0.5]})
    assert shared == ["0", "1"] and grid.tolist() == [[1.0, -0.5], [0.0, -0.5]]
    with pytest.raises(ValueError, match="no replicate in common"):
        paired_grid({"0": [1]}, {"1": [1]})
    with pytest.raises(ValueError, match="2 questions vs 3"):
        paired_grid({"0": [1, 1]}, {"0": [1, 1, 1]})
    with pytest.raises(ValueError, match="NaN"):
        compare([[0.1], [float("nan")]])


def test_the_null_and_format_controls():
    """null_reward: the same constant for every vote (every group-normalised advantage 0); format_reward: 1 where
    an answer is extracted, else 0."""
    from ttrl_lightning.pseudo_labels import PseudoLabelError, pseudo_label

    votes = [{"text": "\\boxed{3}"}, {"text": "no answer here"}, {"text": "\\boxed{4}"}]
    null = pseudo_label("null_reward", votes)
    assert null.label is None and null.rewards == [0.0, 0.0, 0.0] and not null.abstain
    assert pseudo_label("null_reward", votes, value=1).rewards == [1.0, 1.0, 1.0]
    with pytest.raises(PseudoLabelError, match="finite number"):
        pseudo_label("null_reward", votes, value=float("nan"))
    fmt = pseudo_label("format_reward", votes)
    assert fmt.label is None and fmt.rewards == [1.0, 0.0, 1.0]

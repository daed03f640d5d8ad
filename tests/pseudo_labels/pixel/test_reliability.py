"""Dawid-Skene slot reliability (``pseudo_labels.pixel.reliability``) on planted and i.i.d. slots."""
import logging
import random

import pytest

from ttrl_lightning.pseudo_labels import batch_reliability


# ----------------------------------------------------------------------------------------- reliability

def batch(seed, accuracies, queries):
    rng = random.Random(seed)
    return [[str(10 * q) if rng.random() < a else str(10 * q + 1 + rng.randrange(3)) for a in accuracies]
            for q in range(queries)]


def test_a_planted_unreliable_slot_gets_the_lowest_reliability():
    rows = batch(0, [0.8] * 5 + [0.25], 60)
    r = batch_reliability(rows)
    assert len(r) == 60 and all(row == r[0] for row in r)
    slot = r[0]
    assert sum(slot) / 6 == pytest.approx(1.0, rel=1e-12)
    assert min(range(6), key=slot.__getitem__) == 5 and slot[5] < 0.6 < min(slot[:5])


def test_iid_slots_stay_near_one():
    slot = batch_reliability(batch(0, [0.7] * 6, 200))[0]
    assert sum(slot) / 6 == pytest.approx(1.0, rel=1e-12)
    assert max(abs(x - 1.0) for x in slot) < 0.3


def test_reliability_follows_answer_equivalence_and_ragged_rows():
    rows = batch(1, [0.8] * 5 + [0.25], 60)
    rows_eq = [[a + ".0" if j == 2 else a for j, a in enumerate(row)] for row in rows]  # "10" == "10.0"
    assert batch_reliability(rows_eq)[0] == pytest.approx(batch_reliability(rows)[0], rel=1e-12)
    rows[0] = rows[0][:3]
    r = batch_reliability(rows)
    assert len(r[0]) == 3 and r[0] == r[1][:3]


def test_fewer_than_two_queries_gives_ones_and_a_reason(caplog):
    with caplog.at_level(logging.WARNING, logger="ttrl_lightning.pseudo_labels.pixel.labeler"):
        r, reason = batch_reliability([["5", "5", "6"], [None, None, None]], return_reason=True)
    assert r == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert "1 query with an extractable answer" in reason and reason in caplog.text
    assert batch_reliability([["5", None]]) == [[1.0, 1.0]]
    assert batch_reliability(batch(0, [0.8] * 3, 5), return_reason=True)[1] is None

import json

import pytest
import torch

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.data.pool import (PoolError, load_pool, pool_to_records, read_records, records_to_pool,
                                      validate_record, write_records)
from ttrl_lightning.data.simulate import simulate_pool


def _rec(**kw):
    rec = {"id": "q1", "gold": "12", "choices": None,
           "rollouts": [{"answer": "12", "view": "original", "entropy": [0.1, 0.2], "self_certainty": [1.0, 2.0]},
                        {"answer": None, "text": "so the total is \\boxed{\\frac{24}{2}}", "view": "original",
                         "entropy": [0.3], "self_certainty": [0.5]},
                        {"answer": None, "text": "I do not know", "entropy": [0.3, 0.1, 0.2],
                         "self_certainty": [0.5, 0.7, 0.1]},
                        {"answer": "13", "view": "reframed"}]}
    rec.update(kw)
    return rec


def test_records_to_pool_extracts_groups_and_marks_gold():
    pool = records_to_pool([_rec()])
    names = pool.class_names[0]
    # "12" and \frac{24}{2} are one class; the unextractable text shares NO_ANSWER
    assert pool.answer_class[0, 0].tolist() == [0, 0, 1]
    assert names[1] == NO_ANSWER and pool.no_answer_class.tolist() == [1]
    assert pool.class_correct[0].tolist()[:3] == [True, False, False]
    assert pool.answer_class[0, 1, 0].item() == 2 and names[2] == "13"
    assert pool.lengths[0, :3].tolist() == [2, 1, 3]
    assert torch.allclose(pool.signals["self_certainty"][0, 2], torch.tensor([0.5, 0.7, 0.1]))


@pytest.mark.parametrize("mutate,match", [
    (lambda r: r.pop("id"), "missing field 'id'"),
    (lambda r: r.update(rollouts=[]), "rollouts"),
    (lambda r: r["rollouts"][0].update(entropy=[0.1, float("nan")]), r"rollouts\[0\].entropy holds NaN"),
    (lambda r: r["rollouts"][0].update(entropy=[0.1]), r"rollouts\[0\].self_certainty has 2 tokens but another"),
    (lambda r: r["rollouts"][1].update(view="sideways"), r"rollouts\[1\].view"),
    (lambda r: r.update(gold=3), "'gold'"),
    (lambda r: r["rollouts"][2].update(self_certainty="abc"), r"rollouts\[2\].self_certainty"),
])
def test_bad_records_name_record_and_field(mutate, match):
    rec = _rec()
    mutate(rec)
    with pytest.raises(PoolError, match=match):
        validate_record(rec, 0)


def test_pool_needs_fixed_size_and_consistent_signals():
    a, b = validate_record(_rec(), 0), validate_record(_rec(id="q2"), 1)
    b["rollouts"] = b["rollouts"][:2] + b["rollouts"][3:]
    with pytest.raises(PoolError, match="fixed size"):
        records_to_pool([a, b])
    c = validate_record(_rec(id="q3"), 1)
    c["rollouts"][0].pop("entropy")
    with pytest.raises(PoolError, match="some original-view rollouts only"):
        records_to_pool([a, c])


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_round_trip_through_files(tmp_path, ext):
    pool = simulate_pool(num_questions=5, rollouts=4, tokens=6, seed=1)
    path = str(tmp_path / f"pool.{ext}")
    write_records(pool_to_records(pool), path)
    back = load_pool(path)
    assert back.ids == pool.ids
    def labels(p):  # class ids are renumbered by first occurrence; the labels must survive
        return [[p.class_names[i][int(c)] for c in row] for i, row in enumerate(p.answer_class.flatten(1))]
    assert labels(back) == labels(pool)
    assert torch.equal(back.lengths, pool.lengths)
    for k in pool.signals:
        assert torch.allclose(back.signals[k], pool.signals[k])
    # the class ids and correctness survive re-canonicalisation from strings
    assert torch.equal(back.class_correct.gather(1, back.answer_class[:, 0]),
                       pool.class_correct.gather(1, pool.answer_class[:, 0]))


def test_invalid_json_line_is_reported(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(_rec()) + "\n{not json\n")
    with pytest.raises(PoolError, match="record 1"):
        list(read_records(str(p)))


def test_simulator_is_seeded_and_validated():
    a = simulate_pool(num_questions=20, rollouts=8, tokens=8, seed=4)
    b = simulate_pool(num_questions=20, rollouts=8, tokens=8, seed=4)
    assert torch.equal(a.answer_class, b.answer_class) and torch.equal(a.signals["entropy"], b.signals["entropy"])
    assert bool((a.signals["image_attention"] <= a.signals["visual_engagement"]).all())
    with pytest.raises(ValueError):
        simulate_pool(num_questions=0)
    with pytest.raises(ValueError):
        simulate_pool(correct_rate=1.0)

import json
import math

import pytest
import torch

from ttrl_lightning.answers import NO_ANSWER
from ttrl_lightning.data.pool import (FLOAT32_OVERFLOW, MAX_TOKENS_PER_ROLLOUT, PoolError, load_pool,
                                      pool_to_records, read_records, records_to_pool, validate_record,
                                      write_records)
from ttrl_lightning.errors import UserError
from ttrl_lightning.data.simulate import simulate_pool


def _rec(**kw):
    rec = {"id": "q1", "gold": "12", "choices": None,
           "rollouts": [{"answer": "12", "view": "original", "entropy": [0.1, 0.2],
                         "self_certainty": [1.0, 2.0]},
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


def _ro(j, **fields):
    """A mutation setting ``fields`` of rollout ``j``."""
    return lambda r: r["rollouts"][j].update(**fields)


@pytest.mark.parametrize("mutate,match", [
    (lambda r: r.pop("id"), "missing field 'id'"),
    (lambda r: r.update(rollouts=[]), "rollouts"),
    (_ro(0, entropy=[0.1, float("nan")]), r"rollouts\[0\].entropy holds NaN"),
    (_ro(0, entropy=[0.1]), r"rollouts\[0\].self_certainty has 2 tokens but another"),
    (_ro(1, view="sideways"), r"rollouts\[1\].view"),
    (lambda r: r.update(gold=3), "'gold'"),
    (_ro(2, self_certainty="abc"), r"rollouts\[2\].self_certainty"),
    (lambda r: r.update(question="1+11?"), r"record 0 \(id='q1'\): unknown field 'question'"),
    (_ro(3, image_mass=[0.1]), r"rollouts\[3\]: unknown field 'image_mass'"),
    (_ro(0, observation="7"), r"rollouts\[0\]: unknown field 'observation'"),
    # item 5: finite in float64 but inf in float32, the dtype RolloutPool stores signals in
    (_ro(0, entropy=[0.1, 1e308]), r"rollouts\[0\].entropy holds 1e\+308 at token 1.*float32"),
    (_ro(0, logprob=[-3.5e38, 0.0]), r"rollouts\[0\].logprob holds -3.5e\+38 at token 0"),
    (_ro(2, self_certainty=[0.5, float("inf"), 0.1]), r"rollouts\[2\].self_certainty holds inf at token 1"),
    # item 8: strict types -- no numeric strings, no booleans (True is an int in Python), string views only
    (_ro(0, entropy=[0.1, "0.2"]), r"rollouts\[0\].entropy\[1\] must be a number, got string"),
    (_ro(0, entropy=[True, 0.2]), r"rollouts\[0\].entropy\[0\] must be a number, got boolean"),
    (_ro(0, entropy=[None, 0.2]), r"rollouts\[0\].entropy\[0\] must be a number, got null"),
    (_ro(0, entropy=[[0.1], 0.2]), r"rollouts\[0\].entropy\[0\] must be a number, got array"),
    (_ro(1, view=0), r"rollouts\[1\].view must be one of .*got integer 0"),
    (_ro(1, view=""), r"rollouts\[1\].view must be one of .*got string ''"),
    (_ro(1, view=False), r"rollouts\[1\].view must be one of .*got boolean false"),
    (_ro(3, num_tokens=True), r"rollouts\[3\].num_tokens must be an integer.*got boolean true"),
    (_ro(3, num_tokens=3.0), r"rollouts\[3\].num_tokens must be an integer.*got number"),
    (_ro(3, num_tokens=0), r"rollouts\[3\].num_tokens must be an integer in \[1, 32767\]"),
    (_ro(0, self_certanity=[1.0, 2.0]), r"rollouts\[0\]: unknown field 'self_certanity'"),
    (lambda r: r.update(id=17), r"field 'id' must be a non-empty string, got integer 17"),
    (lambda r: r.update(id=None), r"missing field 'id'"),
    (_ro(0, answer=12), r"rollouts\[0\].answer must be a string or null, got integer"),
    # item 10: shares outside [0, 1], integers beyond float, the token limit
    (_ro(0, image_attention=[0.5, 1.5]),
     r"record 0 \(id='q1'\): rollouts\[0\].image_attention\[1\] = 1.5 is outside \[0, 1\]"),
    (_ro(0, image_attention=[-0.1, 0.5]), r"rollouts\[0\].image_attention\[0\] = -0.1 is outside"),
    (_ro(0, visual_engagement=[0.5, 2.0]), r"rollouts\[0\].visual_engagement\[1\] = 2.0 is outside"),
    (_ro(0, entropy=[0.1, 10 ** 400]), r"rollouts\[0\].entropy\[1\] is an integer too large for float32"),
    (_ro(3, num_tokens=10 ** 400), r"rollouts\[3\].num_tokens must be an integer in"),
    (_ro(3, entropy=[0.1] * 32768), r"rollouts\[3\].entropy has 32768 tokens; a rollout may have at most "
                                    r"32767"),
])
def test_bad_records_name_record_and_field(mutate, match):
    rec = _rec()
    mutate(rec)
    with pytest.raises(PoolError, match=match) as err:
        validate_record(rec, 0)
    assert isinstance(err.value, UserError) and "\n" not in str(err.value)  # the CLI's one-line message


def test_float32_overflow_threshold_is_where_torch_rounds_to_inf():
    """FLOAT32_OVERFLOW is the smallest magnitude float32 rounds to inf; the value just below it is kept."""
    below = math.nextafter(FLOAT32_OVERFLOW, 0.0)
    as32 = torch.tensor([below, FLOAT32_OVERFLOW, -below, -FLOAT32_OVERFLOW], dtype=torch.float64).float()
    assert torch.isfinite(as32).tolist() == [True, False, True, False]
    ok = _rec()
    ok["rollouts"][0]["entropy"] = [0.1, below]
    assert validate_record(ok)["rollouts"][0]["entropy"] == [0.1, below]
    ok["rollouts"][0]["entropy"] = [0.1, FLOAT32_OVERFLOW]
    with pytest.raises(PoolError, match="inf in float32"):
        validate_record(ok)


def test_strict_record_accepts_the_documented_forms():
    """Integers are numbers, view may be absent or null, shares may carry float rounding (1 + 1e-7), and the
    token limit itself is allowed: strictness must not refuse valid records."""
    rec = _rec()
    rec["rollouts"][0].update(entropy=[1, 2], image_attention=[0.0, 1.0 + 1e-7], view=None)
    rec["rollouts"][3].update(num_tokens=MAX_TOKENS_PER_ROLLOUT)
    out = validate_record(rec)
    assert out["rollouts"][0]["entropy"] == [1.0, 2.0] and out["rollouts"][0]["view"] == "original"
    assert out["rollouts"][3]["num_tokens"] == 32767


def test_duplicate_ids_are_refused_naming_both_records():
    with pytest.raises(PoolError, match=r"record 2 \(id='q1'\): duplicate id 'q1', already used by record 0"):
        records_to_pool([_rec(), _rec(id="q2"), _rec()])


def test_missing_signal_blames_the_record_that_lacks_it():
    """Whether the odd record comes first or later, the message's subject is the record without the array."""
    lacking = _rec(id="bare")
    for ro in lacking["rollouts"]:
        ro.pop("self_certainty", None)
    with pytest.raises(PoolError, match=r"record 1 \(id='bare'\): lacks per-token 'self_certainty', which "
                                        r"record 0 \(id='q1'\) has"):
        records_to_pool([_rec(), lacking, _rec(id="q3")])
    with pytest.raises(PoolError, match=r"record 0 \(id='bare'\): lacks per-token 'self_certainty', which "
                                        r"record 1 \(id='q2'\) has"):
        records_to_pool([lacking, _rec(id="q2")])


def test_token_counts_are_all_or_none():
    a, b = _rec(), _rec(id="q2")
    for rec in (a, b):
        for ro in rec["rollouts"]:
            ro.pop("entropy", None), ro.pop("self_certainty", None)
    a["rollouts"][0]["num_tokens"] = 3
    with pytest.raises(PoolError, match=r"record 0 \(id='q1'\): rollouts\[1\] lacks a token count"):
        records_to_pool([a, b])
    for ro in a["rollouts"][:3]:
        ro["num_tokens"] = 2
    with pytest.raises(PoolError, match=r"record 1 \(id='q2'\): lacks token counts .*which record 0"):
        records_to_pool([a, b])


def test_pool_needs_fixed_size_and_consistent_signals():
    a, b = validate_record(_rec(), 0), validate_record(_rec(id="q2"), 1)
    b["rollouts"] = b["rollouts"][:2] + b["rollouts"][3:]
    with pytest.raises(PoolError, match="fixed size"):
        records_to_pool([a, b])
    c = validate_record(_rec(id="q3"), 1)
    c["rollouts"][0].pop("entropy")
    with pytest.raises(PoolError, match=r"record 1 \(id=.q3.\): rollouts\[0\] lacks per-token .entropy."):
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
    with pytest.raises(PoolError, match=r"bad\.jsonl, line 2: invalid JSON at column 2"):
        list(read_records(str(p)))


def test_simulator_is_seeded_and_validated():
    a = simulate_pool(num_questions=20, rollouts=8, tokens=8, seed=4)
    b = simulate_pool(num_questions=20, rollouts=8, tokens=8, seed=4)
    assert torch.equal(a.answer_class, b.answer_class)
    assert torch.equal(a.signals["entropy"], b.signals["entropy"])
    for bad, match in [({"num_questions": 0}, "num_questions"), ({"correct_rate": 1.0}, "correct_rate"),
                       ({"signal_strength": float("nan")}, "signal_strength must be a finite number"),
                       ({"tokens": 32768}, r"tokens must lie in \[2, 32767\]"),
                       ({"token_noise": -1.0}, "token_noise")]:
        with pytest.raises(UserError, match=match):
            simulate_pool(**bad)


def test_simulated_visual_signals_follow_the_documented_rule():
    """simulate.py: visual_engagement_t = sigmoid(-1 + 0.6 x + n_t) with x = s (y - 1/2) + N(0, 1), and
    image_attention_t = visual_engagement_t * sigmoid(1 + n'_t), n, n' ~ N(0, token_noise^2), zero-padded
    after each rollout's length. Recomputed from the pool: a simulator that broke the rule (another scale,
    a shared noise, no dependence on correctness) fails one of these moments."""
    s, noise = 2.0, 0.5
    pool = simulate_pool(num_questions=300, rollouts=8, tokens=16, seed=4, signal_strength=s,
                         token_noise=noise)
    valid = torch.arange(16)[None, None] < pool.lengths[..., None]
    ve, ia = pool.signals["visual_engagement"].double(), pool.signals["image_attention"].double()
    assert (ve[~valid] == 0).all() and (ia[~valid] == 0).all()
    n_img = torch.logit(ia[valid] / ve[valid]) - 1.0  # = n'_t
    assert abs(float(n_img.mean())) < 0.02 and abs(float(n_img.std()) - noise) < 0.02
    logit_ve = torch.logit(ve).where(valid, 0.0)
    # independent noises
    assert abs(float(torch.corrcoef(torch.stack([n_img, logit_ve[valid]]))[0, 1])) < 0.03
    per_rollout = logit_ve.sum(-1) / valid.sum(-1)  # -1 + 0.6 x + mean noise
    correct = pool.class_correct.gather(1, pool.answer_class[:, 0])
    gap = float(per_rollout[correct].mean() - per_rollout[~correct].mean())
    assert abs(gap - 0.6 * s) < 0.15  # E[x | y=1] - E[x | y=0] = s
    expected_mean = -1.0 + 0.6 * s * (float(correct.double().mean()) - 0.5)
    assert abs(float(per_rollout.mean()) - expected_mean) < 0.06


def _choice_records():
    rolls = [{"answer": None, "text": "The answer is (b).", "view": "original"},
             {"answer": "A", "view": "original"}]
    return [{"id": "mc1", "gold": "B", "choices": {"A": "cat", "B": "dog"}, "rollouts": rolls},
            {"id": "open", "gold": "7", "choices": None, "rollouts": [{"answer": "7"}, {"answer": "8"}]},
            {"id": "mc2", "gold": "D", "choices": {"A": "1", "C": "3", "D": "4"}, "rollouts": rolls}]


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_choices_survive_files_and_the_columnar_pool(tmp_path, ext):
    """Records with different option letters (a Parquet struct would merge them into one set of fields)."""
    path = str(tmp_path / f"pool.{ext}")
    records = [validate_record(r, i) for i, r in enumerate(_choice_records())]
    write_records(records, path)
    back = list(read_records(path))
    assert [r["choices"] for r in back] == [r["choices"] for r in records]
    assert back == records
    pool = records_to_pool(back)
    assert pool.choices == [r["choices"] for r in records]
    again = list(pool_to_records(pool))
    assert [r["choices"] for r in again] == pool.choices
    assert records_to_pool(again).class_names == pool.class_names == [["B", "A"], ["7", "8"], ["B", "A"]]
    path2 = str(tmp_path / f"again.{ext}")
    write_records(again, path2)
    assert load_pool(path2).choices == pool.choices

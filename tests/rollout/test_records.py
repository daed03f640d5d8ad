"""records_from_rollouts: engine rollouts -> pool records -> columnar pool, answers and signals intact."""
from __future__ import annotations

import math

import pytest
import torch

from ttrl_lightning.answers import NO_ANSWER, answers_equal, extract_answer
from ttrl_lightning.data.pool import PoolError, read_records, records_to_pool, validate_record, write_records
from ttrl_lightning.models import build_char_tokenizer, load_model
from ttrl_lightning.rollout import HFGenerateEngine, Rollouts, SamplingParams, records_from_rollouts


def _rollouts(texts, n, lengths, signals=("logprob", "entropy")):
    """A hand-made Rollouts with per-token signals value = 10 * row + position on the completion mask."""
    R, C = len(texts), max(lengths)
    mask = (torch.arange(C)[None] < torch.tensor(lengths)[:, None]).long()
    value = (10 * torch.arange(R)[:, None] + torch.arange(C)[None]).float()
    return Rollouts(prompt_ids=torch.ones(R, 2, dtype=torch.long), prompt_mask=torch.ones(R, 2, dtype=torch.long),
                    completion_ids=torch.ones(R, C, dtype=torch.long), completion_mask=mask, texts=list(texts),
                    group=torch.arange(R // n).repeat_interleave(n), n=n,
                    signals={k: torch.where(mask.bool(), value, float("nan")) for k in signals})


def _labels(pool, q, view):
    return [pool.class_names[q][int(c)] for c in pool.answer_class[q, view] if c >= 0]


def test_views_of_one_question_merge_into_one_record():
    texts = [r"so \boxed{12}", "I do not know", r"\boxed{24/2}", r"\boxed{13}",  # question a, original / reframed
             "The answer is (b).", "(A)"]                                          # question b, multiple choice
    ro = _rollouts(texts, n=2, lengths=[3, 1, 2, 2, 4, 1])
    recs = records_from_rollouts(ro, ids=["a", "a", "b"], golds=["12", "12", "B"],
                                 choices=[None, None, {"A": "cat", "B": "dog"}],
                                 views=["original", "reframed", "original"])
    assert [r["id"] for r in recs] == ["a", "b"]
    assert [r["view"] for r in recs[0]["rollouts"]] == ["original", "original", "reframed", "reframed"]
    assert recs[1]["choices"] == {"A": "cat", "B": "dog"}
    assert [r["num_tokens"] for r in recs[0]["rollouts"]] == [3, 1, 2, 2]
    assert recs[0]["rollouts"][0]["logprob"] == [0.0, 1.0, 2.0]  # row 0, positions 0..2 on the mask
    assert recs[1]["rollouts"][0]["entropy"] == [40.0, 41.0, 42.0, 43.0]
    for i, rec in enumerate(recs):
        assert validate_record(rec, i) == rec  # already in normal form
    with pytest.raises(PoolError, match="fixed size"):  # 4 rollouts of question a, 2 of b: not a pool
        records_to_pool(recs)
    pool = records_to_pool(recs[:1])
    assert _labels(pool, 0, 0) == ["12", NO_ANSWER] and _labels(pool, 0, 1) == ["12", "13"]
    assert pool.class_correct[0, pool.answer_class[0, 1, 0]]  # 24/2 is gold-equivalent
    torch.testing.assert_close(pool.signals["logprob"][0, :2], torch.tensor([[0.0, 1.0, 2.0], [10.0, 0.0, 0.0]]))
    mc = records_to_pool(recs[1:])
    assert _labels(mc, 0, 0) == ["B", "A"] and mc.choices == [{"A": "cat", "B": "dog"}]


def test_bad_inputs_name_the_problem():
    ro = _rollouts(["x", "y"], n=1, lengths=[1, 1])
    with pytest.raises(ValueError, match="ids has 1 entries for 2 prompts"):
        records_from_rollouts(ro, ids=["a"])
    with pytest.raises(ValueError, match="disagree on its gold"):
        records_from_rollouts(ro, ids=["a", "a"], golds=["1", "2"])
    with pytest.raises(ValueError, match="'surprise' is not a per-token field"):
        records_from_rollouts(ro, ids=["a", "b"], signals=["surprise"])
    with pytest.raises(ValueError, match="'image_attention' was not recorded"):
        records_from_rollouts(ro, ids=["a", "b"], signals=["image_attention"])
    ro.signals["logprob"][0, 0] = float("nan")  # a NaN on the completion mask is a bad measurement
    with pytest.raises(PoolError, match=r"rollouts\[0\].logprob holds NaN"):
        records_from_rollouts(ro, ids=["a", "b"])


@pytest.mark.parametrize("source", ["generate", "replay"])
def test_engine_rollouts_become_a_pool_in_one_call(source, tmp_path):
    tok = build_char_tokenizer()
    model = load_model("tiny:qwen2", tok, seed=0)
    engine = HFGenerateEngine(tok, record_signals=True, signal_source=source)
    ro = engine.generate(model, ["12+7=", "3-1="], SamplingParams(n=3, max_new_tokens=8, seed=0))
    lengths = ro.completion_mask.sum(1)
    assert lengths.min() < lengths.max()  # some rows end early: the padding is really exercised
    recs = records_from_rollouts(ro, ids=["q0", "q1"], golds=["19", "2"])
    path = str(tmp_path / "pool.jsonl")
    write_records(recs, path)
    assert list(read_records(path)) == recs
    pool = records_to_pool(recs)
    assert pool.ids == ["q0", "q1"] and pool.gold == ["19", "2"]
    assert pool.lengths[:, :3].flatten().tolist() == lengths.tolist()
    for r in range(6):
        q, j = divmod(r, 3)
        want = extract_answer(ro.texts[r])
        got = pool.class_names[q][int(pool.answer_class[q, 0, j])]
        assert got == want or answers_equal(got, want)
        n = int(lengths[r])
        for name in ("logprob", "entropy", "self_certainty"):
            mine = ro.signals[name][r]
            torch.testing.assert_close(pool.signals[name][q, j, :n], mine[:n])
            assert all(not math.isnan(v) for v in mine[:n].tolist()) and torch.isnan(mine[n:]).all()

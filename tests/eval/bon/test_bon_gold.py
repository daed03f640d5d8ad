"""Questions without a gold answer in the best-of-N protocol (ttrl_lightning/eval/bon/protocol.py): left out and named,
never scored as wrong; a pool with no gold answer at all is refused."""
import pytest
import torch

from ttrl_lightning.data.pool import PoolError, load_pool, pool_to_records, records_to_pool, write_records
from ttrl_lightning.data.simulate import simulate_pool
from ttrl_lightning.eval.bon.protocol import BoNConfig, evaluate_pool

METHODS = ["first", "majority", "oracle", "visconf_rwc", "hms"]


def test_questions_without_gold_are_left_out_and_named():
    records = list(pool_to_records(simulate_pool(num_questions=12, rollouts=6, tokens=5, seed=2)))
    ungraded = {3, 7, 8}
    for i in ungraded:
        records[i]["gold"] = None
    cfg = BoNConfig(ns=(3, 6), subsets=4, seed=1)
    result = evaluate_pool(records_to_pool(records), METHODS, cfg, progress=False)
    graded = [r for i, r in enumerate(records) if i not in ungraded]
    expected = evaluate_pool(records_to_pool(graded), METHODS, cfg, progress=False)
    assert result.without_gold == [records[i]["id"] for i in sorted(ungraded)]
    assert result.num_questions == 9 and expected.without_gold == []
    for m in METHODS:  # the same subsets: fixed_subsets depends on the question count, 9 in both
        for n in cfg.ns:
            assert torch.equal(result.per_question[m][n], expected.per_question[m][n])
    assert result.accuracy()["oracle"]["6"] > 0  # had the ungraded been scored 0, accuracies would shrink


def test_pool_without_any_gold_is_refused(tmp_path):
    records = list(pool_to_records(simulate_pool(num_questions=3, rollouts=4, tokens=3, seed=0)))
    for rec in records:
        rec["gold"] = None
    path = str(tmp_path / "unlabelled.jsonl")
    write_records(records, path)
    pool = load_pool(path)  # a valid pool (e.g. for test-time training): only accuracy needs gold
    with pytest.raises(PoolError, match=r"unlabelled\.jsonl: no record has a gold answer .* all 3\)"):
        evaluate_pool(pool, METHODS, BoNConfig(ns=(2,), subsets=2), progress=False)


def test_method_requirements_name_the_pool_file(tmp_path):
    pool = simulate_pool(num_questions=3, rollouts=4, tokens=3, seed=0, reframed=False)
    records = list(pool_to_records(pool))
    for rec in records:
        for ro in rec["rollouts"]:
            del ro["self_certainty"]
    path = str(tmp_path / "nosc.jsonl")
    write_records(records, path)
    pool = load_pool(path)
    with pytest.raises(PoolError, match=r"nosc\.jsonl: method 'visconf_top1' needs per-token "
                                        r"\['self_certainty'\]"):
        evaluate_pool(pool, ["visconf_top1"], BoNConfig(ns=(2,), subsets=2), progress=False)
    with pytest.raises(PoolError, match=r"nosc\.jsonl: methods \['hms'\] need reframed-view rollouts"):
        evaluate_pool(pool, ["hms"], BoNConfig(ns=(2,), subsets=2), progress=False)

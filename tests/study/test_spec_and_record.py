"""A study spec is checked as it is read (every error one line naming the key), and a record is never wiped:
it refuses another spec or start naming the field, --restart moves it aside, a resume keeps finished runs."""
import copy
import json
import os

import pytest

from ttrl_lightning.study.record import RecordError, StudyRecord, first_difference
from ttrl_lightning.study.spec import SpecError, load_spec, spec_from_dict

BASE = {
    "name": "t", "out": "OUT",
    "questions": {"kind": "task", "task": "add2_carry", "seed": 0, "splits": {"train": 8, "validation": 4}},
    "start": {"kind": "checkpoint", "path": "x.ckpt"},
    "train": {"config": "ttrl/tiny_demo.yaml", "split": "train", "validation": "validation"},
    "arms": {"majority": {}, "self_harmony": {"overrides": {"model": {"init_args": {"voting": {"num_votes": 8}}}}},
             "random_reward": {}, "gold_reward": {}},
    "seeds": [0, 1],
    "evaluation": {"splits": ["train"], "k": 2},
    "report": {"split": "train", "controls": ["random_reward"], "gold": "gold_reward"},
}


def _with(**changes):
    d = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = d
        for p in parents:
            node = node[p]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return d


def test_a_good_spec_reads_and_arms_take_their_labeler_from_the_name():
    spec = spec_from_dict(BASE)
    assert spec.arms["self_harmony"].labeler == "self_harmony"
    assert [a.role for a in spec.arms.values()] == ["label_free", "label_free", "control", "gold"]
    assert spec.evaluation.seed_for(1) == 1001


@pytest.mark.parametrize("changes, said", [
    ({"arms__majority": {"overide": {}}}, "arms.majority: unknown key 'overide'"),
    ({"arms__majority_x": {"labeler": "majorty"}}, "arms.majority_x: unknown labeler 'majorty'"),
    ({"evaluation__splits": ["train", "test"]}, "evaluation.splits: unknown split 'test'"),
    ({"report__controls": ["null_reward"]}, "report.controls: unknown arm 'null_reward'"),
    ({"train__split": "trian"}, "train.split: unknown split 'trian'"),
    ({"start__kind": "magic"}, "start.kind 'magic' is not one of"),
    ({"seeds": [0, 0]}, "seeds must be a non-empty list of distinct"),
    ({"evaluation__k": 0}, "evaluation.k: must be >= 1"),
    ({"evaluation__seed_offset": 1}, "would make an evaluation seed equal a run seed"),
    ({"questions__splits__train": "many"}, "questions.splits.train.n: 'many' is not of type int"),
    ({"report": KeyError}, "missing key 'report'"),
    ({"extra": 1}, "unknown key 'extra'"),
])
def test_a_spec_error_is_one_line_naming_the_key(changes, said):
    with pytest.raises(SpecError) as e:
        spec_from_dict(_with(**changes), "s.yaml")
    assert said in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("s.yaml")


def test_a_split_larger_than_its_pool_is_one_line(tmp_path):
    from ttrl_lightning.study.questions import build_questions

    spec = spec_from_dict(_with(questions__task="add2", questions__task_kwargs={"max_operand": 3},
                                questions__splits={"train": 500, "validation": 4}))
    with pytest.raises(SpecError) as e:
        build_questions(spec.questions, str(tmp_path))
    assert "questions.splits" in str(e.value) and "\n" not in str(e.value)


def test_packaged_study_configs_read():
    from ttrl_lightning.cli.configs import packaged_configs

    names = [n for n in packaged_configs() if n.startswith("study/")]
    assert {"study/demo.yaml", "study/demo_seeds.yaml", "study/demo_vlm.yaml"} <= set(names)
    for name in names:
        load_spec(name)


def _record_with_a_run(spec):
    record = StudyRecord.open(spec)
    record.data["runs"]["majority/start0/seed0"] = {"arm": "majority"}
    record.check_start(0, "a" * 64)
    record.save()
    return record


def test_a_record_is_never_wiped(tmp_path, capsys):
    spec = spec_from_dict(_with(out=str(tmp_path)))
    _record_with_a_run(spec)
    path = tmp_path / "study.json"
    # a new study where a record exists: refused, naming both flags
    with pytest.raises(RecordError, match="--resume continues it, --restart moves it aside"):
        StudyRecord.open(spec)
    # a resume with other settings: refused, naming the field; the record is unchanged
    before = path.read_bytes()
    other = spec_from_dict(_with(out=str(tmp_path), evaluation__k=4))
    with pytest.raises(RecordError) as e:
        StudyRecord.open(other, resume=True)
    assert "evaluation.k (record: 2, this spec: 4)" in str(e.value) and "\n" not in str(e.value)
    changed_arm = spec_from_dict(_with(out=str(tmp_path), arms__self_harmony={"overrides": {}}))
    with pytest.raises(RecordError, match="arm 'self_harmony' was run with another definition"):
        StudyRecord.open(changed_arm, resume=True)
    assert path.read_bytes() == before
    # more arms and seeds extend it
    more = spec_from_dict(_with(out=str(tmp_path), seeds=[0, 1, 2], arms__null_reward={}))
    assert "majority/start0/seed0" in StudyRecord.open(more, resume=True).data["runs"]
    # another start (other weights, whatever the path): refused by digest
    record = StudyRecord.open(spec, resume=True)
    with pytest.raises(RecordError, match="start 0 has other weights"):
        record.check_start(0, "b" * 64)
    # --restart moves it aside, never deletes it
    fresh = StudyRecord.open(other, restart=True)
    assert fresh.data["runs"] == {}
    aside = [p for p in os.listdir(tmp_path) if p.startswith("study.") and p != "study.json"]
    assert len([p for p in aside if p.endswith(".json")]) == 1
    assert json.loads((tmp_path / [p for p in aside if p.endswith(".json")][0]).read_text())["runs"]
    # a torn record: one line, nothing overwritten
    path.write_text('{"format": 1, "runs": {')
    with pytest.raises(RecordError, match="not a readable study record"):
        StudyRecord.open(spec, resume=True)
    assert path.read_text() == '{"format": 1, "runs": {'


def test_a_save_merges_the_runs_another_process_wrote(tmp_path):
    spec = spec_from_dict(_with(out=str(tmp_path)))
    a = StudyRecord.open(spec)
    a.save()
    b = StudyRecord.open(spec, resume=True)
    a.data["runs"]["majority/start0/seed0"] = {"arm": "majority"}
    a.save()
    b.data["runs"]["pixel/start0/seed0"] = {"arm": "pixel"}
    b.save()
    assert set(json.loads((tmp_path / "study.json").read_text())["runs"]) == {"majority/start0/seed0",
                                                                           "pixel/start0/seed0"}


def test_first_difference_names_the_path():
    assert first_difference({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}) == "a.b[1] (record: 2, this spec: 3)"
    assert first_difference({"a": 1}, {"a": 1}) is None
    assert "only in this spec" in first_difference({"a": 1}, {"a": 1, "b": 2})


def test_the_legacy_record_prints_todays_table_and_a_broken_one_is_one_line(tmp_path):
    """The first curriculum study's committed record (per-run means) is read by study.legacy: its table as it
    was reported, and the t intervals its means allow; a truncated record or a run without its seed is one line."""
    from ttrl_lightning.study.legacy import legacy_report

    path = os.path.join(os.path.dirname(__file__), "../../benchmarks/results/real_model_study/real_model_ttrl.json")
    table = legacy_report(path, ["visconf", "random_reward", "gold_reward"])
    assert "visconf                       3                   27.6 (+5.1, 0.6)                   28.7 (+4.8, 2.1)" \
        in table
    assert "gold_reward                   3                  37.3 (+14.8, 0.8)                   31.2 (+7.2, 1.0)" \
        in table
    assert "visconf                      vs checkpoint +4.8 [+2.2, +7.4]; vs random (seed-paired) +6.9" in table
    broken = tmp_path / "real_model_ttrl.json"
    broken.write_text(open(path).read()[:5000])
    with pytest.raises(RecordError, match="not a readable record"):
        legacy_report(str(broken))
    record = json.load(open(path))
    del next(iter(record["runs"].values()))["seed"]
    broken.write_text(json.dumps(record))
    with pytest.raises(RecordError, match="KeyError: 'seed'"):
        legacy_report(str(broken))

"""Disjoint splits by construction (data.splits) for every question source: reasoning-gym, the generated tasks
and the generated scenes; a split that cannot be filled is one error naming how many distinct questions the
source gave."""
import json

import pytest

from ttrl_lightning.data.questions import QuestionDataModule, read_questions, task_source, task_splits
from ttrl_lightning.data.splits import (QuestionSource, SplitError, SplitSpec, distinct_questions, draw_splits,
                                        keys_of, overlaps, prompt_key, question_key)

CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def _pairwise_disjoint(splits):
    found = overlaps(splits)
    assert found and all(n == 0 for n in found.values()), found
    for name, qs in splits.items():  # and no split repeats a question itself
        assert len(keys_of(qs)) == len(qs), name


def test_reasoning_gym_seeds_overlap_and_the_pool_does_not():
    pytest.importorskip("reasoning_gym")
    from ttrl_lightning.data.questions import questions_from_task

    # the reason for the module: seed s + 1 is seed s shifted by one item
    a = questions_from_task("reasoning_gym:chain_sum", 16, 1, **CHAIN_SUM)
    b = questions_from_task("reasoning_gym:chain_sum", 16, 2, **CHAIN_SUM)
    assert [q["prompt"] for q in a[1:]] == [q["prompt"] for q in b[:-1]]
    splits = task_splits("reasoning_gym:chain_sum", 0, {"scan": 24, "held_out": 24, "calibration": 16,
                                                        "trained_on": 80}, **CHAIN_SUM)
    assert [len(v) for v in splits.values()] == [24, 24, 16, 80]
    _pairwise_disjoint(splits)
    # two one-digit terms and + or -: 10 x 10 x 2 prompts, 145 problems (a + b is b + a: 55 sums; a - 0 is a + 0)
    assert len(distinct_questions(task_source("reasoning_gym:chain_sum", 0, **CHAIN_SUM), 10_000)) == 145
    with pytest.raises(SplitError, match=r"reasoning_gym:chain_sum \(seed 0, .*\): 145 distinct questions found "
                                         r"in \d+ draws, but the splits need 156 \(train 140, held_out 16\)"):
        task_splits("reasoning_gym:chain_sum", 0, {"train": 140, "held_out": 16}, **CHAIN_SUM)


@pytest.mark.parametrize("task", ["arith", "add2_carry"])
def test_generated_task_splits_are_disjoint_and_prefix_stable(task):
    big = task_splits(task, 3, {"train": 40, "validation": 20, "calibration": 20})
    _pairwise_disjoint(big)
    # the training split is the first distinct questions of the stream, whatever else is asked for
    assert task_splits(task, 3, {"train": 40})["train"] == big["train"]


def test_arith_is_small_and_says_how_small():
    # operands 0..2 and + / -: 3 x 3 x 2 = 18 prompts, 12 problems (6 sums of two terms in any order, 9
    # differences, of which a - 0 is a + 0)
    with pytest.raises(SplitError, match=r"arith \(seed 0, .*\): 12 distinct questions found in \d+ draws, but "
                                         r"the splits need 20 \(a 10, b 10\)"):
        task_splits("arith", 0, {"a": 10, "b": 10}, max_operand=2)


def test_scene_splits_are_disjoint_by_text_and_pixels(tmp_path):
    from ttrl_lightning.data.cota import agent_prompt_splits
    from ttrl_lightning.data.scenes import scene_source
    from ttrl_lightning.generate.scene_questions import write_scene_questions

    splits = draw_splits([SplitSpec("train", 12, scene_source(0, ["count", "colour"])),
                          SplitSpec("validation", 6, scene_source(0, ["count", "colour"]))])
    _pairwise_disjoint(splits)
    # the same wording with other pixels is another question
    texts = [it["prompt"] for it in splits["train"] + splits["validation"]]
    assert len(set(texts)) < len(texts)
    rows = agent_prompt_splits(0, {"train": 4, "validation": 2}, ["count"])
    assert [r["id"] for r in rows["train"]] == [f"count-0-{i}" for i in range(4)]
    assert [r["id"] for r in rows["validation"]] == ["count-0-4", "count-0-5"]
    # a question file of scenes excludes another's: same prompt and same pixels (a PNG is its array)
    first = write_scene_questions(str(tmp_path / "a"), 5, seed=0, kinds=["colour"])
    second = write_scene_questions(str(tmp_path / "b"), 5, seed=0, kinds=["colour"], exclude=[first])
    a, b = read_questions(first), read_questions(second)
    assert not keys_of(a) & keys_of(b)
    assert [q["id"] for q in b] == [f"colour-0-{i}" for i in range(5, 10)]
    assert question_key({"prompt": "x", "images": [a[0]["images"][0]]}) == question_key(
        {"prompt": "X ", "images": [__import__("PIL.Image").Image.open(a[0]["images"][0]).convert("RGB")]})


def test_keys_normalise_text_and_names_are_checked():
    assert prompt_key("  Ｗhat is\t2 +  2? ") == prompt_key("what is 2 + 2?")
    src = QuestionSource("three", lambda n: [{"prompt": p} for p in ["a", "A ", "b", "c"][:n]])
    # a finite stream: 'A ' repeats 'a'
    assert [q["prompt"] for q in draw_splits([SplitSpec("x", 3, src)])["x"]] == ["a", "b", "c"]
    with pytest.raises(SplitError, match="three: 3 distinct questions found in 4 draws, but the splits need 4"):
        draw_splits([SplitSpec("x", 4, src)])
    with pytest.raises(SplitError, match=r"besides the 1 excluded ones"):
        draw_splits([SplitSpec("x", 3, src)], exclude=keys_of([{"prompt": "b"}]))
    with pytest.raises(ValueError, match="distinct"):
        draw_splits([SplitSpec("x", 1, src), SplitSpec("x", 1, src)])
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        draw_splits([SplitSpec("x", 0, src)])


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_the_datamodule_refuses_a_calibration_file_that_shares_questions(tmp_path):
    train = _write(tmp_path / "t.jsonl", [{"id": "a", "prompt": "1+1="}, {"id": "b", "prompt": "2+2="}])
    cal = _write(tmp_path / "c.jsonl", [{"id": "c1", "prompt": "2 + 2 =", "gold": "4"},
                                        {"id": "c2", "prompt": "2+2=", "gold": "4"}])
    with pytest.raises(SplitError, match=r"shares 1 question\(s\) with the train split \('b'\)"):
        QuestionDataModule(path=train, calibration_path=cal).calibration_questions()
    # TTRL's own protocol scores the trained-on questions: a validation file may be the training file
    dm = QuestionDataModule(path=train, val_path=train)
    assert [q["id"] for q in dm.val_questions()] == ["a", "b"]
    # a generated validation split skips the training file's questions
    rows = [{"id": f"q{i}", "prompt": q["prompt"]} for i, q in enumerate(task_splits("arith", 0, {"x": 5})["x"])]
    dm = QuestionDataModule(path=_write(tmp_path / "g.jsonl", rows), val_task="arith", n_val=5, seed=0)
    assert not keys_of(dm.val_questions()) & keys_of(dm.train_questions())


def test_ttrl_questions_exclude_prints_the_overlap(tmp_path, capsys):
    pytest.importorskip("reasoning_gym")
    from ttrl_lightning.cli import main

    common = ["questions", "--task", "reasoning_gym:chain_sum", "--config", json.dumps(CHAIN_SUM),
              "--instruction", "Answer with just the number."]
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    assert main([*common, "--n", "100", "--seed", "1", "--out", a]) == 0
    assert main([*common, "--n", "45", "--seed", "2", "--out", b, "--exclude", a]) == 0
    out = capsys.readouterr().out
    assert f"overlap with {a} (100 questions): 0" in out
    assert not keys_of(read_questions(a)) & keys_of(read_questions(b))
    assert main([*common, "--n", "10", "--seed", "3", "--out", str(tmp_path / "c.jsonl"), "--exclude", a, b]) == 1
    err = capsys.readouterr().err
    assert "0 distinct questions found" in err and "besides the 145 excluded ones" in err


def test_ttrl_questions_writes_scene_questions_with_their_images_and_excludes_another_file(tmp_path, capsys):
    """The generated image questions come from ``ttrl questions --task scenes`` (no second command): the file
    reads back with its images, ``--exclude`` leaves out the other file's questions (same prompt and pixels)."""
    from ttrl_lightning.cli import main
    from ttrl_lightning.generate.scene_questions import write_scene_questions

    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    kinds = ["--config", json.dumps({"kinds": ["colour", "object_colour"]})]
    assert main(["questions", "--task", "scenes", *kinds, "--n", "4", "--out", a]) == 0
    assert main(["questions", "--task", "scenes", *kinds, "--n", "3", "--out", b, "--exclude", a]) == 0
    assert f"overlap with {a} (4 questions): 0" in capsys.readouterr().out
    qa, qb = read_questions(a), read_questions(b)
    assert [q["id"] for q in qa] == ["colour-0-0", "object_colour-0-1", "colour-0-2", "object_colour-0-3"]
    assert all(len(q["images"]) == 1 and q["images"][0].startswith(str(tmp_path / "images")) for q in qa + qb)
    assert not keys_of(qa) & keys_of(qb)
    # the same questions as the function writes
    again = read_questions(write_scene_questions(str(tmp_path / "fn"), 4, 0, ["colour", "object_colour"]))
    assert [(q["id"], q["prompt"], q["gold"]) for q in again] == [(q["id"], q["prompt"], q["gold"]) for q in qa]
    for extra, needle in ((["--instruction", "Be brief."], "argument --instruction: scenes' prompts already ask"),
                          (["--config", json.dumps({"kinds": ["when"]})], "kinds must be a non-empty list among"),
                          (["--config", json.dumps({"kind": ["count"]})], "scenes takes only 'kinds'")):
        assert main(["questions", "--task", "scenes", "--n", "2", "--out", str(tmp_path / "c.jsonl"), *extra]) == 1
        assert needle in capsys.readouterr().err


def test_a_split_far_larger_than_its_task_is_refused_after_a_bounded_number_of_draws():
    """``--n 1000000`` on a task of a few thousand questions read 16 million draws before saying so; the patience
    is capped (data.splits.MAX_PATIENCE), so the refusal comes after the task's questions plus the cap."""
    import re

    from ttrl_lightning.data.splits import MAX_PATIENCE

    pytest.importorskip("reasoning_gym")
    with pytest.raises(SplitError, match=r"chain_sum \(seed 0, .*\): 145 distinct questions found in \d+ draws, but "
                                         r"the splits need 1000000") as err:
        task_splits("reasoning_gym:chain_sum", 0, {"train": 1_000_000}, **CHAIN_SUM)
    draws = int(re.search(r"found in (\d+) draws", str(err.value)).group(1))
    assert draws <= 10_000 + MAX_PATIENCE  # the last new question comes within a few thousand draws

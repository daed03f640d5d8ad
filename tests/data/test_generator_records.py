"""A question file's ``generator`` record is drawn again to key the question (data.splits.question_key), so it is
bounded where it is read: an index past ``MAX_GENERATOR_INDEX`` or a setting its generator cannot draw in bounded
time is one line naming the file and the row (a record with ``"index": 200000000``, ``"min_carries": 50`` or
reasoning-gym's ``min_terms: 1000000`` hung ``ttrl questions --exclude``, ``ttrl fit --data.init_args.path`` and
an SFT ``exclude``, growing to GBs). A record is taken for its question only when the question's prompt is the
regenerated prompt or wraps it (an instruction after one space, a chat template): the record of ``9+87=`` on the
question ``69+87=`` is ignored, not read as ``9+87=``."""
import json
import time

import pytest

from ttrl_lightning.data.questions import QuestionError, questions_from_task, read_questions
from ttrl_lightning.data.splits import MAX_GENERATOR_INDEX, generated_prompt, keys_of, question_key, wraps
from ttrl_lightning.errors import UserError


def _file(tmp_path, rows, name="q.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _record(task="add2", index=0, seed=0, **config):
    return {"task": task, "config": config, "seed": seed, "index": index}


@pytest.mark.parametrize("generator, needle", [
    (_record(index=200_000_000), r"index 200,000,000 is past the last item .* \(100,000, "),
    (_record(index=MAX_GENERATOR_INDEX + 1), r"index 100,001 is past the last item"),
    (_record("reasoning_gym:chain_sum", index=10**30), r"index 1,000,000,000,000,000,000,000,000,000,000 is past"),
    (_record(min_carries=50), r"add2: config: min_carries must be an integer in \[0, 2\], got 50"),
    (_record("add2_carry", max_operand=10**40), r"max_operand must be an integer in \[0, 1,000,000,000,000\]"),
    (_record(max_draws=10**9), r"max_draws must be an integer in \[1, 100,000\]"),
    (_record(carry_weights=[1.0] * 10_000), r"carry_weights must be a list of 1 to 64 finite numbers"),
    (_record(min_carries=True), r"min_carries must be an integer"),
    (_record("arith", terms=10**6), r"terms must be an integer in \[2, 64\]"),
    (_record("arith", ops="+" * 10**5), r"ops must be a non-empty string"),
    (_record(reframing="nope"), r"unknown reframing 'nope'"),
])
def test_an_unbounded_record_is_one_line_naming_the_row(tmp_path, generator, needle):
    path = _file(tmp_path, [{"id": "a", "prompt": "1+1=", "gold": "2"},
                            {"id": "b", "prompt": "9+87=", "gold": "96", "generator": generator}])
    start = time.monotonic()
    with pytest.raises(QuestionError, match=rf"q.jsonl, line 2 \(id='b'\): field 'generator': .*{needle}") as err:
        read_questions(path)
    assert "\n" not in str(err.value) and time.monotonic() - start < 10


@pytest.mark.parametrize("config, needle", [
    ({"min_terms": 1_000_000, "max_terms": 1_000_000}, r"config m(in|ax)_terms must be within \+-100 .*got 1000000"),
    ({"max_digits": 10**60}, r"config max_digits must be within \+-100 .*got an integer of 200 bits"),
    ({"max_digits": float("inf")}, r"config max_digits must be within"),
])
def test_a_reasoning_gym_record_is_bounded_by_its_generators_defaults(tmp_path, config, needle):
    pytest.importorskip("reasoning_gym")
    path = _file(tmp_path, [{"id": "b", "prompt": "x", "generator": _record("reasoning_gym:chain_sum", **config)}])
    start = time.monotonic()
    with pytest.raises(QuestionError, match=rf"line 1 \(id='b'\): field 'generator': reasoning-gym chain_sum: {needle}"):
        read_questions(path)
    assert time.monotonic() - start < 10


def test_every_route_that_reads_a_question_file_refuses_it_in_one_line(tmp_path, capsys):
    """``ttrl questions --exclude``, the training data module's ``path`` and an SFT ``exclude``."""
    from ttrl_lightning.cli import main
    from ttrl_lightning.data.datamodules import SFTDataModule
    from ttrl_lightning.data.questions import QuestionDataModule

    bad = _file(tmp_path, [{"id": "b", "prompt": "9+87=", "gold": "96", "generator": _record(index=200_000_000)}])
    start = time.monotonic()
    assert main(["questions", "--task", "add2", "--n", "4", "--exclude", bad, "--out",
                 str(tmp_path / "out.jsonl")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("ttrl questions: ") and "\n" not in err and "index 200,000,000" in err
    with pytest.raises(QuestionError, match="index 200,000,000"):
        QuestionDataModule(path=bad).train_questions()
    with pytest.raises(QuestionError, match="index 200,000,000"):
        SFTDataModule(task="add2", exclude=[bad])
    assert time.monotonic() - start < 30


def test_the_last_index_reads_and_keys_in_bounded_time(tmp_path):
    raw = generated_prompt(_record(index=MAX_GENERATOR_INDEX))
    assert raw is not None
    path = _file(tmp_path, [{"id": "a", "prompt": raw, "generator": _record(index=MAX_GENERATOR_INDEX)}])
    assert keys_of(read_questions(path)) == {question_key({"prompt": raw})}
    with pytest.raises(UserError, match="at most 100,001 questions of one generated stream"):
        questions_from_task("add2", MAX_GENERATOR_INDEX + 2, 0)


def test_a_reasoning_gym_item_is_drawn_alone_as_the_stream_gives_it():
    pytest.importorskip("reasoning_gym")
    from ttrl_lightning.data import splits

    config = {"min_terms": 2, "max_terms": 3}
    stream = [q["prompt"] for q in questions_from_task("reasoning_gym:chain_sum", 300, 5, **config)]
    splits._GENERATED.clear()
    for index in (0, 63, 64, 200, 299):
        assert generated_prompt(_record("reasoning_gym:chain_sum", index, 5, **config)) == stream[index]
    start = time.monotonic()  # far on in the stream: one item, not the stream up to it
    assert generated_prompt(_record("reasoning_gym:chain_sum", MAX_GENERATOR_INDEX, 5, **config))
    assert time.monotonic() - start < 10


def test_a_slow_config_is_one_line_after_the_time_bound(monkeypatch):
    from ttrl_lightning.data import splits

    monkeypatch.setattr(splits, "GENERATOR_SECONDS", 0.3)
    slow = _record("add2", index=MAX_GENERATOR_INDEX, max_operand=10**12 - 1, min_carries=11, max_draws=100_000)
    start = time.monotonic()
    with pytest.raises(UserError, match=r"generator record of task add2: drawing its stream again up to item "
                                        r"100,000 took more than 0.3 s"):
        generated_prompt(slow)
    assert time.monotonic() - start < 10


def test_a_record_of_another_item_is_ignored():
    """The record of ``9+87=`` on ``69+87=`` keyed the question as ``9+87=``, so a file holding ``69+87=``
    showed overlap 0 with it; the record is now ignored and the question keyed on its own prompt."""
    questions = questions_from_task("add2", 64, 0)
    for q in questions:
        raw, gen = q["prompt"], q["generator"]
        other = {"prompt": "6" + raw}
        assert question_key({**other, "generator": gen}) == question_key(other) != question_key({"prompt": raw})
        for edited in (raw + "5", raw + " 5", raw + " + 5", "Compute " + raw, "-" + raw, raw[:-1]):
            assert question_key({"prompt": edited, "generator": gen}) == question_key({"prompt": edited})
    # a file of the question as written and a file of it under another item's record share it
    raw, gen = questions[5]["prompt"], questions[7]["generator"]
    assert keys_of([{"prompt": raw}]) & keys_of([{"prompt": raw, "generator": gen}])


RAW = "45+74="


@pytest.mark.parametrize("prompt", [
    RAW, f"{RAW} Answer with just the number.", f"  {RAW}\n", f"{RAW} answer briefly",
    f"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n{RAW}<|im_end|>\n<|im_start|>assistant\n",
    f"<|im_start|>user\n{RAW} Answer with just the number.<|im_end|>\n<|im_start|>assistant\n",
    f"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{RAW}<|eot_id|>",
    f"<bos><start_of_turn>user\n{RAW}<end_of_turn>\n<start_of_turn>model\n",
    f"<s>[INST] {RAW} [/INST]", f"<|user|>\n{RAW}<|end|>\n<|assistant|>\n",
    f"<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{RAW}<|im_end|>",
])
def test_known_wrappings_are_the_question(prompt):
    assert wraps(prompt, RAW)


@pytest.mark.parametrize("prompt", [
    "6" + RAW, RAW + "5", RAW + " 5", RAW + " + 1=", "What is " + RAW, "(" + RAW + ")",
    f"<|im_start|>user\n6{RAW}<|im_end|>", f"<|im_start|>user\nSolve {RAW}<|im_end|>",
    f"<|im_start|>user\n{RAW}9<|im_end|>", "", "45+74",
])
def test_a_prompt_that_only_holds_the_question_is_not_it(prompt):
    assert not wraps(prompt, RAW)

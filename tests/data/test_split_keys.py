"""Split keys on the question, not on its wrapping (data.splits.question_key): an instruction appended by
``ttrl questions --instruction``, another instruction, none, or a chat template around the prompt give one key
for a generated question; and the demo's SFT traces never show a question of its TTRL splits answered."""
import json

import pytest

from ttrl_lightning.data.questions import QuestionDataModule, read_questions
from ttrl_lightning.data.splits import SplitError, keys_of, problem_text, question_key

CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
INSTRUCTION = "Answer with just the number."


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _questions(tmp_path, name, *extra, task="reasoning_gym:chain_sum", config=CHAIN_SUM, n=24, seed=0):
    from ttrl_lightning.cli import main

    out = str(tmp_path / f"{name}.jsonl")
    assert main(["questions", "--task", task, "--config", json.dumps(config), "--n", str(n), "--seed", str(seed),
                 "--out", out, *extra]) == 0
    return out


def _templated(tmp_path, path, name):
    """The file's questions with a chat template around every prompt (the generator record kept)."""
    rows = [dict(id=q["id"], prompt=f"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n{q['prompt']}"
                                    "<|im_end|>\n<|im_start|>assistant\n", gold=q["gold"], generator=q["generator"])
            for q in read_questions(path)]
    return _write(tmp_path / f"{name}.jsonl", rows)


def _raw(path):
    """The prompts of a file as the generator gave them (read from the generator record, not from the key)."""
    return {problem_text(q) for q in read_questions(path)}


@pytest.mark.parametrize("first, second", [
    (["--instruction", INSTRUCTION], []),                                # the repro: the instruction, then none
    ([], ["--instruction", INSTRUCTION]),                                # none, then the instruction
    (["--instruction", INSTRUCTION], ["--instruction", "Reply with a number."]),  # another instruction
    ("template", []),                                                    # a file that holds the chat template
])
def test_ttrl_questions_exclude_sees_through_the_wrapping(tmp_path, capsys, first, second):
    pytest.importorskip("reasoning_gym")
    a = _questions(tmp_path, "a", *(first if first != "template" else []))
    if first == "template":
        a = _templated(tmp_path, a, "a_templated")
    b = _questions(tmp_path, "b", *second, "--exclude", a)
    assert f"overlap with {a} (24 questions): 0" in capsys.readouterr().out
    # the same seed and task: without the key seeing through the wrapping, b would be a's 24 questions again
    assert not _raw(a) & _raw(b)
    assert len(_raw(a)) == len(_raw(b)) == 24
    assert not keys_of(read_questions(a)) & keys_of(read_questions(b))


def test_the_key_of_a_generated_question_is_its_generators_prompt():
    gen = {"task": "add2_carry", "config": {}, "seed": 3, "index": 5}
    from ttrl_lightning.data.questions import questions_from_task

    raw = questions_from_task("add2_carry", 6, 3)[5]["prompt"]
    plain = question_key({"prompt": raw})
    for prompt in (raw, f"{raw} {INSTRUCTION}", f"<|user|>\n{raw} Be brief.\n<|assistant|>\n"):
        assert question_key({"prompt": prompt, "generator": gen}) == plain
    # a prompt edited since it was drawn, a task unknown here, no record: the prompt as written
    assert question_key({"prompt": "1+1=", "generator": gen}) == question_key({"prompt": "1+1="})
    unknown = {"task": "not_a_task", "config": {}, "seed": 0, "index": 0}
    assert question_key({"prompt": f"{raw} x", "generator": unknown}) == question_key({"prompt": f"{raw} x"})
    assert question_key({"prompt": f"{raw} {INSTRUCTION}"}) != plain


def test_the_datamodule_sees_through_the_wrapping(tmp_path):
    pytest.importorskip("reasoning_gym")
    # a training file written with the instruction; a generated validation split drawn without one
    train = _questions(tmp_path, "train", "--instruction", INSTRUCTION, task="add2_carry", config={}, n=32)
    dm = QuestionDataModule(path=train, val_task="add2_carry", n_val=32, seed=0)
    assert not _raw(train) & {problem_text(q) for q in dm.val_questions()}
    # a calibration file written with another instruction, and with a chat template, holds the training questions
    other = _questions(tmp_path, "cal", "--instruction", "Reply with a number.", task="add2_carry", config={}, n=32)
    for cal in (other, _templated(tmp_path, other, "cal_templated")):
        with pytest.raises(SplitError, match=r"shares 32 question\(s\) with the train split"):
            QuestionDataModule(path=train, calibration_path=cal).calibration_questions()


def test_the_demo_sft_traces_show_no_ttrl_question(tmp_path):
    """The shipped configs: no trace of the demo study's SFT (configs/study/demo.yaml's start: configs/sft/
    tiny_ttrl.yaml) shows a question of its training, validation or calibration split answered, as its question or
    as a fused trace's rewritten one, whether through the study's route (the split files it writes, given to the
    SFT's ``exclude``) or the SFT config's own ``exclude``."""
    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.fit import parse_config
    from ttrl_lightning.data.datamodules import SFTDataModule
    from ttrl_lightning.data.tasks import trace_problems
    from ttrl_lightning.study.questions import build_questions
    from ttrl_lightning.study.spec import load_spec

    spec = load_spec("study/demo.yaml")
    sft = parse_config(["--config", config_path(spec.start.config)]).data.init_args
    paths = build_questions(spec.questions, str(tmp_path))
    keys = {name: keys_of(read_questions(p)) for name, p in paths.items()}
    assert [len(k) for k in keys.values()] == [128, 32, 64]
    taken = set().union(*keys.values())
    args = {k: v for k, v in vars(sft).items() if k in SFTDataModule.__init__.__code__.co_varnames}
    for exclude in (sft.exclude, list(paths.values())):
        dm = SFTDataModule(**{**args, "exclude": exclude})
        for n, seed in ((sft.n_train, sft.seed), (sft.n_val, sft.seed + 1)):
            traces = dm.traces(n, seed)
            assert len(traces) == n
            shown = {question_key({"prompt": q}) for t in traces for q in trace_problems(t)}
            assert not shown & taken
    # the check can fail: without the exclusion the traces hold many of them (53 of the 128 trained-on ones)
    dm = SFTDataModule(**{**args, "exclude": []})
    shown = {question_key({"prompt": q}) for t in dm.traces(sft.n_train, sft.seed) for q in trace_problems(t)}
    assert len(shown & keys["train"]) > 30


def test_trace_problems_reads_the_fused_rewritten_question():
    from ttrl_lightning.data.tasks import AdditionTask, Segment, trace_problems

    task = AdditionTask()
    fused = [Segment("12+7= reframe:", "prompt"), Segment(task.fused_completion(12, 7) + "<eos>", "text")]
    assert trace_problems(fused) == ["12+7=", "7+12="]
    assert trace_problems([Segment("12+7=", "prompt"), Segment("\\boxed{19}<eos>", "text")]) == ["12+7="]
    assert trace_problems([Segment("x", "text")]) == []


def test_sft_exclude_refuses_a_bad_entry():
    from ttrl_lightning.data.datamodules import SFTDataModule
    from ttrl_lightning.errors import UserError

    for bad, match in (([{"task": "add2_carry"}], "a question file's path or a generated split"),
                       ([{"task": "add2_carry", "n": 0}], "n must be an integer >= 1"),
                       ([{"task": "no_such_task", "n": 3}], "cannot draw")):
        with pytest.raises(UserError, match=match):
            SFTDataModule(task="add2", exclude=bad)


def test_the_vlm_demo_sft_scenes_show_no_ttrl_question(tmp_path):
    """The VLM demo's route with its shipped config: the SFT's scene questions (configs/sft/tiny_vlm.yaml) skip
    every question of the three TTRL question files the demo writes and passes to the SFT's ``exclude``."""
    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.fit import parse_config
    from ttrl_lightning.data.scene_qa import scene_qa_splits
    from ttrl_lightning.study.questions import build_questions
    from ttrl_lightning.study.spec import load_spec

    spec = load_spec("study/demo_vlm.yaml")
    sft = parse_config(["--config", config_path(spec.start.config)]).data.init_args
    paths = build_questions(spec.questions, str(tmp_path))
    taken = set().union(*(keys_of(read_questions(p)) for p in paths.values()))
    splits = scene_qa_splits(sft.seed, {"train": sft.n_train, "validation": sft.n_val}, sft.kinds,
                             exclude=list(paths.values()))
    for items in splits.values():
        assert not keys_of([{"prompt": it["prompt"], "images": it["images"]} for it in items]) & taken

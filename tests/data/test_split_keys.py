"""Split keys on the question, not on its wrapping (data.splits.question_key): an instruction appended by
``ttrl questions --instruction``, another instruction, none, or a chat template around the prompt give one key
for a generated question; and the demo's SFT traces never show a question of its TTRL splits answered."""
import json
import re

import pytest

from ttrl_lightning.data.questions import QuestionDataModule, read_questions
from ttrl_lightning.data.splits import SplitError, keys_of, problem_key, problem_text, question_key

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


def _problem(prompt: str):
    """The problem an ``a+b=`` prompt asks, its two terms in either order (read here, not by the split key, so the
    check does not rest on the code it checks); another prompt as it is."""
    m = re.fullmatch(r"\s*(\d+)\s*\+\s*(\d+)\s*=\s*", prompt)
    return tuple(sorted(int(t) for t in m.groups())) if m else prompt


def test_the_demo_sft_answers_no_reordered_twin_of_a_ttrl_question(tmp_path):
    """Problems, not prompts: no SFT trace of the demo study shows ``b+a=`` answered, as its question or as a fused
    trace's rewritten one (which is the reordered question itself), for a training, validation or calibration
    question ``a+b=``; and no split holds another's twin. Before the split key read problems (70320d9) the kept
    traces answered the twins of 53 of the 128 trained-on questions (``68+32=`` -> 100 beside the TTRL question
    ``32+68=``)."""
    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.fit import parse_config
    from ttrl_lightning.data.datamodules import SFTDataModule
    from ttrl_lightning.data.tasks import trace_problems
    from ttrl_lightning.study.questions import build_questions
    from ttrl_lightning.study.spec import load_spec

    spec = load_spec("study/demo.yaml")
    sft = parse_config(["--config", config_path(spec.start.config)]).data.init_args
    paths = build_questions(spec.questions, str(tmp_path))
    problems = {name: [_problem(q["prompt"]) for q in read_questions(p)] for name, p in paths.items()}
    assert all(isinstance(t, tuple) for ts in problems.values() for t in ts)  # every question is a+b=
    names = list(problems)
    for i, a in enumerate(names):
        assert len(set(problems[a])) == len(problems[a]), a
        for b in names[i + 1:]:
            assert not set(problems[a]) & set(problems[b]), (a, b)
    args = {k: v for k, v in vars(sft).items() if k in SFTDataModule.__init__.__code__.co_varnames}
    for exclude in (list(paths.values()), sft.exclude):
        dm = SFTDataModule(**{**args, "exclude": exclude})
        for n, seed in ((sft.n_train, sft.seed), (sft.n_val, sft.seed + 1)):
            answered = {_problem(q) for t in dm.traces(n, seed) for q in trace_problems(t)}
            twins = {name: sum(p in answered for p in ps) for name, ps in problems.items()}
            assert twins == {name: 0 for name in problems}, (exclude, seed, twins)


def test_a_reordered_sum_or_product_is_one_problem():
    """data.splits.problem_key: the terms of a sum (signs kept with their terms) or the factors of a product in
    any order are one problem; an expression that is part of a longer one (letters, powers, division, a
    product inside a sum) keeps its order."""
    same = [("12+7=", "7+12="), ("State the final answer: 5 + 7 =", "State the final answer: 7 + 5 ="),
            ("a: 5 - 7 =", "a: -7 + 5 ="), ("55 + 98 - 93 + 77 =", "77 - 93 + 55 + 98 ="), ("3 * -2", "-2*3"),
            ("2*3*4=", "4 × 2 × 3="), ("(2+3)*4", "(3+2)*4"), ("12+7= reframe:", "7+12= reframe:"),
            ("4 - 0 =", "4 + 0 =")]
    other = [("5 - 7", "7 - 5"), ("x - 2 + 3", "x - 3 + 2"), ("2 + 3 * x", "3 + 2 * x"), ("2+3*4=", "3+2*4="),
             ("2+3/4", "3+2/4"), ("2^3+1", "2^1+3"), ("5+7 =", "5+8 ="), ("What is 5+7?", "Compute 5+7.")]
    for a, b in same:
        assert problem_key(a) == problem_key(b), (a, b)
        assert question_key({"prompt": a}) == question_key({"prompt": b})
    for a, b in other:
        assert problem_key(a) != problem_key(b), (a, b)


def test_splits_and_exclude_skip_a_reordered_twin(tmp_path, capsys):
    """draw_splits takes no reordered twin of a question already taken (by the stream, by another split or by an
    excluded file), and ``ttrl questions --exclude`` leaves out a file's twins."""
    from ttrl_lightning.cli import main
    from ttrl_lightning.data.splits import QuestionSource, SplitSpec, draw_splits

    rows = [{"prompt": p} for p in ("12+7=", "7+12=", "3+4=", "4+3=", "5+6=", "6+5=", "1+2=")]
    source = QuestionSource("twins", lambda n: rows[:n])
    splits = draw_splits([SplitSpec("a", 2, source), SplitSpec("b", 1, source)])
    assert [[q["prompt"] for q in qs] for qs in splits.values()] == [["12+7=", "3+4="], ["5+6="]]
    excluded = keys_of([{"prompt": "19 + 0 ="}, {"prompt": "4+3="}])
    assert [q["prompt"] for q in draw_splits([SplitSpec("a", 3, source)], exclude=excluded)["a"]] == \
        ["12+7=", "5+6=", "1+2="]
    a = _questions(tmp_path, "a", task="add2_carry", config={}, n=64)
    twins = _write(tmp_path / "twins.jsonl", [{"id": f"t{i}", "prompt": "{1}+{0}=".format(*_problem(q["prompt"])),
                                               "gold": q["gold"]} for i, q in enumerate(read_questions(a))])
    b = _questions(tmp_path, "b", "--exclude", twins, task="add2_carry", config={}, n=64)
    assert f"overlap with {twins} (64 questions): 0" in capsys.readouterr().out
    assert not {_problem(q["prompt"]) for q in read_questions(a)} & {_problem(q["prompt"]) for q in read_questions(b)}


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

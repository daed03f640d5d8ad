"""reasoning-gym generators as a question source (issue 22, item 3): questions with the generator's gold, its
score_answer beside the project's answer equivalence, disagreements counted, and the sources that read it."""
import json

import pytest

pytest.importorskip("reasoning_gym")

from ttrl_lightning.cli import main  # noqa: E402
from ttrl_lightning.data.questions import QuestionDataModule, questions_from_task  # noqa: E402
from ttrl_lightning.data.reasoning_gym_tasks import gold_check, score_answers  # noqa: E402
from ttrl_lightning.errors import UserError  # noqa: E402

TASK = "reasoning_gym:chain_sum"


def test_questions_carry_the_generators_gold_and_are_seeded():
    import reasoning_gym

    qs = questions_from_task(TASK, 5, 3)
    ref = reasoning_gym.create_dataset("chain_sum", size=5, seed=3)
    assert [q["prompt"] for q in qs] == [e["question"] for e in ref]
    assert [q["gold"] for q in qs] == [e["answer"] for e in ref]
    assert [q["id"] for q in qs] == [f"rg-chain_sum-3-{i}" for i in range(5)]
    assert questions_from_task(TASK, 5, 3) == qs and questions_from_task(TASK, 5, 4) != qs
    harder = questions_from_task(TASK, 5, 3, min_terms=5, max_terms=5)
    assert all(q["prompt"].count(" + ") + q["prompt"].count(" - ") == 4 for q in harder)


def test_the_scorer_and_the_equivalence_side_by_side():
    qs = questions_from_task(TASK, 3, 0)
    golds = [q["gold"] for q in qs]
    wrong = [str(int(g) + 1) for g in golds]
    scored = score_answers(TASK, [q["id"] for q in qs], [[g, w, None] for g, w in zip(golds, wrong)])
    assert scored == [[True, False, False]] * 3
    # each question is scored against its own entry, found from its id wherever it sits in the stream
    later = questions_from_task(TASK, 9, 0)[5:]
    assert score_answers(TASK, [q["id"] for q in later], [[q["gold"]] for q in later]) == [[True]] * 4
    assert score_answers(TASK, [later[0]["id"]], [[later[1]["gold"]]]) == [[later[0]["gold"] == later[1]["gold"]]]
    with pytest.raises(UserError, match="is not one of reasoning-gym chain_sum's"):
        score_answers(TASK, ["q1"], [["1"]])
    # the scorer and the equivalence disagree on one sample each way
    check = gold_check([[True, False], [True, True]], [[True, True], [False, True]])
    assert check == {"samples": 4, "project_accuracy": 0.75, "score_answer_accuracy": 0.75, "project_only": 1,
                     "score_answer_only": 1, "scorer_errors": 0}


def test_a_scorer_that_raises_counts_the_answer_wrong_and_is_counted():
    """reasoning-gym's prime_factorization scorer raises on ``433.0``; that crashed ``ttrl eval --task`` after
    sampling. Now the answer is wrong by the scorer, the error is recorded, and the gold check counts it."""
    from ttrl_lightning.data.reasoning_gym_tasks import sampled_gold_check

    task = "reasoning_gym:prime_factorization"
    qs = questions_from_task(task, 2, 0)
    errors = []
    scored = score_answers(task, [q["id"] for q in qs], [[q["gold"], "433.0"] for q in qs], errors=errors)
    assert [row[0] for row in scored] == [True, True] and [row[1] for row in scored] == [False, False]
    raised = [e for e in errors if e[1] == "433.0"]
    assert len(raised) == len(errors) == 2 and all(":" in e[2] for e in raised)
    check = sampled_gold_check(task, [{"id": q["id"], "gold": q["gold"], "answers": [q["gold"], "433.0"]}
                                      for q in qs])
    assert check["scorer_errors"] == 2 and check["score_answer_accuracy"] == 0.5


def test_unknown_generators_and_configs_are_one_line():
    with pytest.raises(UserError, match="unknown reasoning-gym generator 'nope'; known: .*chain_sum"):
        questions_from_task("reasoning_gym:nope", 2, 0)
    with pytest.raises(UserError, match="name a reasoning-gym generator"):
        questions_from_task("reasoning_gym:", 2, 0)
    with pytest.raises(UserError, match="reasoning-gym chain_sum: bad config"):
        questions_from_task(TASK, 2, 0, nonsense=1)


def test_datamodule_and_eval_read_it(tmp_path, capsys):
    dm = QuestionDataModule(task=TASK, n=4, batch_size=2, val_task=TASK, n_val=2, seed=1)
    dm.setup("fit")
    assert [q["gold"] for q in dm.train_questions()] == [q["gold"] for q in questions_from_task(TASK, 4, 1)]
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "tiny:qwen2", "--task", TASK, "--n", "3", "--k", "2", "--no-progress",
                 "--answer-extractor", "last_number", "--out", str(out)]) == 0
    assert "gold check (reasoning_gym:chain_sum's score_answer" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["gold_check"]["samples"] == 6 and report["settings"]["task"] == TASK


def test_ttrl_questions_writes_one_file_for_fit_eval_and_generate(tmp_path, capsys):
    from ttrl_lightning.data.questions import read_questions

    out = tmp_path / "q" / "chain_sum.jsonl"
    config = '{"min_terms": 2, "max_terms": 2}'
    assert main(["questions", "--task", TASK, "--config", config, "--n", "4", "--seed", "2", "--out", str(out)]) == 0
    want = questions_from_task(TASK, 4, 2, min_terms=2, max_terms=2)
    assert read_questions(out) == want
    dm = QuestionDataModule(path=str(out), batch_size=2)
    dm.setup("fit")
    assert [q["id"] for q in dm.train_questions()] == [q["id"] for q in want]
    pool = tmp_path / "pool.jsonl"
    assert main(["generate", "--model", "tiny:qwen2", "--data", str(out), "--n", "2", "--out", str(pool),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["questions", "--task", TASK, "--config", "[1]", "--out", str(out)]) == 1  # a usage error
    assert "a JSON object of the task's settings" in capsys.readouterr().err
    told = tmp_path / "told.jsonl"
    assert main(["questions", "--task", TASK, "--config", config, "--n", "4", "--seed", "2",
                 "--instruction", " Answer with just the number. ", "--out", str(told)]) == 0
    assert [q["prompt"] for q in read_questions(told)] == [q["prompt"] + " Answer with just the number."
                                                           for q in want]
    assert main(["questions", "--task", TASK, "--instruction", "  ", "--out", str(told)]) == 1
    assert "instruction" in capsys.readouterr().err


def test_a_config_value_of_the_wrong_type_is_one_line():
    """``min_terms: 2.5`` reached ``random.randrange`` and raised a ValueError traceback; now it is refused
    with the field's name when the dataset is made."""
    with pytest.raises(UserError, match=r"reasoning-gym chain_sum: config min_terms must be an integer, got 2.5"):
        questions_from_task(TASK, 3, 0, min_terms=2.5)
    with pytest.raises(UserError, match=r"config min_terms must be an integer, got True"):
        questions_from_task(TASK, 3, 0, min_terms=True, max_terms=3)
    assert len(questions_from_task(TASK, 3, 0, min_terms=2, max_terms=3)) == 3


def test_eval_on_a_question_file_runs_the_generators_gold_check_as_the_task_does(tmp_path, capsys):
    """``ttrl eval --data`` on a reasoning-gym question file ran no scorer check, so nobody saw where the scorer
    and the equivalence disagree. The file records each question's generator (task, config, seed, index), so
    the check runs from it, even for a question whose id was renamed, and a malformed record is one line."""
    from ttrl_lightning.data.questions import QuestionError, read_questions

    path = tmp_path / "q.jsonl"
    assert main(["questions", "--task", TASK, "--n", "3", "--seed", "0", "--out", str(path)]) == 0
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["generator"] == {"task": TASK, "config": {}, "seed": 0, "index": 0}
    rows[0]["id"] = "renamed"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    args = ["--model", "tiny:qwen2", "--k", "2", "--no-progress", "--answer-extractor", "last_number"]
    by_file, by_task = tmp_path / "file.json", tmp_path / "task.json"
    assert main(["eval", "--data", str(path), *args, "--out", str(by_file)]) == 0
    assert f"gold check ({TASK} (recorded in {path})'s score_answer" in capsys.readouterr().out
    assert main(["eval", "--task", TASK, "--n", "3", "--task-seed", "0", *args, "--out", str(by_task)]) == 0
    file_check = json.loads(by_file.read_text())["gold_check"]
    task_check = json.loads(by_task.read_text())["gold_check"]
    assert file_check["samples"] == task_check["samples"] == 6
    assert {k: file_check[k] for k in task_check} == task_check  # the same questions and seed: the same check
    rows[1]["generator"] = {"task": TASK, "config": {}, "seed": -1, "index": 0}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(QuestionError, match="line 2 .*generator.*seed must be an integer >= 0"):
        read_questions(path)

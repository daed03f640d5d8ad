"""Generated tasks: RL prompts with correct answers, SFT traces written in the tool-call protocol."""
import random

from ttrl_lightning.data.tasks import generate_prompts, generate_traces, make_task
from ttrl_lightning.tools.protocol import parse_call, split_observation


def test_generated_prompts_are_correct():
    for row in generate_prompts("arith3", 50, seed=1, ops="+-"):
        assert str(eval(row["prompt"][:-1])) == row["gold"]
    for row in generate_prompts("arith", 50, seed=1):
        assert str(eval(row["prompt"][:-1])) == row["gold"]


def test_traces_call_tools_and_observe_their_results():
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b}
    for trace in generate_traces("arith3", 20, seed=2):
        kinds = [s.kind for s in trace]
        assert kinds == ["prompt", "action", "observation", "action", "observation", "text"]
        for call, obs in ((trace[1], trace[2]), (trace[3], trace[4])):
            c = parse_call(call.text)
            start, result, end = split_observation(obs.text)
            assert (start, end) == ("<out>", "</out>") and int(result) == ops[c.name](*map(int, c.args))
        assert trace[-1].text == split_observation(trace[4].text)[1] + "<eos>"
    # same seed, same traces (a trace is drawn from the task's own random.Random)
    assert make_task("arith").trace(random.Random(0)) == make_task("arith").trace(random.Random(0))


# ----------------------------------------------------------------------------------------------------------
# add2: two-number addition, Solver and fused Reframe-and-Solve formats, shifted splits
# ----------------------------------------------------------------------------------------------------------
import re  # noqa: E402

import pytest  # noqa: E402

from ttrl_lightning.answers import extract_answer  # noqa: E402
from ttrl_lightning.data.tasks import (  # noqa: E402
    FUSED_PROMPT_TEMPLATE, REFRAMINGS, TASKS, AdditionTask, count_carries,
)
from ttrl_lightning.pseudo_labels import fused_format_score  # noqa: E402

_Q = re.compile(r"^(\d+)\+(\d+)=$")


def _carries_by_hand(a: int, b: int) -> int:
    """Column additions written out on the digit strings (an independent count)."""
    da, db = str(a)[::-1], str(b)[::-1]
    carry = n = 0
    for i in range(max(len(da), len(db))):
        s = int(da[i] if i < len(da) else 0) + int(db[i] if i < len(db) else 0) + carry
        carry = int(s > 9)
        n += carry
    return n


def test_count_carries_matches_column_addition():
    assert [count_carries(*p) for p in [(0, 0), (5, 5), (19, 1), (99, 1), (45, 54), (999, 1)]] == [0, 1, 1, 2, 0, 3]
    rng = random.Random(3)
    for _ in range(500):
        a, b = rng.randint(0, 5000), rng.randint(0, 5000)
        assert count_carries(a, b) == _carries_by_hand(a, b)


def test_add2_prompts_are_correct_and_deterministic_per_seed():
    rows = generate_prompts("add2", 200, seed=5)
    for row in rows:
        a, b = map(int, _Q.match(row["prompt"]).groups())
        assert 0 <= a <= 99 and 0 <= b <= 99 and row["gold"] == str(a + b)
    assert rows == generate_prompts("add2", 200, seed=5)
    assert rows != generate_prompts("add2", 200, seed=6)
    assert generate_traces("add2", 50, seed=5) == generate_traces("add2", 50, seed=5)


def test_shifted_split_differs_as_documented():
    """SFT split: two-carry problems rare (carry_weights); add2_carry: every problem has two carries."""
    sft = [tuple(map(int, _Q.match(r["prompt"]).groups()))
           for r in generate_prompts("add2", 2000, seed=0, carry_weights=[0.45, 0.45, 0.1])]
    shifted = [tuple(map(int, _Q.match(r["prompt"]).groups())) for r in generate_prompts("add2_carry", 500, seed=0)]
    share2 = sum(_carries_by_hand(a, b) == 2 for a, b in sft) / len(sft)
    assert 0.07 < share2 < 0.13
    assert all(_carries_by_hand(a, b) == 2 for a, b in shifted)
    assert all(a + b >= 100 for a, b in shifted)  # both columns carry: a three-digit sum
    # default add2 (no weights) follows the uniform pairs: 30% / 45% / 25% (exact shares of 0..99 squared)
    plain = [tuple(map(int, _Q.match(r["prompt"]).groups())) for r in generate_prompts("add2", 4000, seed=1)]
    assert abs(sum(_carries_by_hand(a, b) == 2 for a, b in plain) / 4000 - 0.2475) < 0.03
    # carry bounds
    capped = generate_prompts("add2", 300, seed=2, max_carries=0)
    assert all(_carries_by_hand(*map(int, _Q.match(r["prompt"]).groups())) == 0 for r in capped)


def test_traces_teach_both_formats_in_the_documented_share():
    traces = generate_traces("add2", 1000, seed=7, fused_share=0.3)
    assert FUSED_PROMPT_TEMPLATE.startswith("{prompt}")
    suffix = FUSED_PROMPT_TEMPLATE.format(prompt="")
    fused = [t for t in traces if t[0].text.endswith(suffix)]
    assert 0.25 < len(fused) / len(traces) < 0.35
    for t in traces:
        assert [s.kind for s in t] == ["prompt", "text"] and t[1].text.endswith("<eos>")
        if t not in fused:
            a, b = map(int, _Q.match(t[0].text).groups())
            assert t[1].text == "\\boxed{%d}<eos>" % (a + b)
    assert all(t[0].text.endswith(suffix) for t in generate_traces("add2", 20, seed=7, fused_share=1.0))
    assert not any(t[0].text.endswith(suffix) for t in generate_traces("add2", 20, seed=7, fused_share=0.0))


def test_fused_traces_score_full_format_and_extract_the_answer():
    for t in generate_traces("add2", 200, seed=8, fused_share=1.0):
        question = t[0].text[: -len(FUSED_PROMPT_TEMPLATE.format(prompt=""))]
        a, b = map(int, _Q.match(question).groups())
        completion = t[1].text.removesuffix("<eos>")
        assert fused_format_score(completion) == 1.0
        assert extract_answer(completion) == str(a + b)
        strategy, rewritten = re.fullmatch(r"STRATEGY: (\w+)\nREWRITTEN PROBLEM: (\S+)\nSOLUTION: .*",
                                           completion).groups()
        assert strategy == "swap" and rewritten == f"{b}+{a}="


def test_solver_completion_extracts_the_answer():
    for t in generate_traces("add2", 100, seed=9, fused_share=0.0):
        a, b = map(int, _Q.match(t[0].text).groups())
        assert extract_answer(t[1].text.removesuffix("<eos>")) == str(a + b)


@pytest.mark.parametrize("name", REFRAMINGS.names())
def test_reframings_preserve_the_answer(name):
    rng = random.Random(10)
    for _ in range(200):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        rewritten = REFRAMINGS[name](a, b)
        x, y = map(int, _Q.match(rewritten).groups())
        assert x + y == a + b and rewritten != f"{a}+{b}=" or a == b


def test_add2_refuses_bad_settings():
    with pytest.raises(ValueError, match="min_operand"):
        AdditionTask(min_operand=5, max_operand=3)
    with pytest.raises(ValueError, match="fused_share"):
        AdditionTask(fused_share=1.5)
    with pytest.raises(ValueError, match="carry_weights"):
        AdditionTask(carry_weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="carry_weights"):
        AdditionTask(carry_weights=[1.0, 0.0], min_carries=1)
    with pytest.raises(KeyError, match="swap"):
        AdditionTask(reframing="nope")
    with pytest.raises(ValueError, match="after 3 draws"):  # possible, but rarer than 3 draws find
        AdditionTask(max_operand=99999, min_carries=5, max_draws=3).draw(random.Random(0))
    with pytest.raises(ValueError, match=r"min_carries must be an integer in \[0, 1\], got 2"):  # never drawn
        AdditionTask(max_operand=9, min_carries=2, max_draws=100)
    assert "add2" in TASKS and "add2_carry" in TASKS

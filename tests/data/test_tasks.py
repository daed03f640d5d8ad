"""Generated tasks: RL prompts with correct answers, SFT traces written in the tool-call protocol."""
import random

from ttrl_lightning.data.tasks import generate_prompts, generate_traces, make_task
from ttrl_lightning.tools.protocol import parse_call, split_observation


def test_generated_prompts_are_correct():
    for row in generate_prompts("arith3", 50, seed=1, ops="+-"):
        assert str(eval(row["prompt"][:-1])) == row["answer"]
    for row in generate_prompts("arith", 50, seed=1):
        assert str(eval(row["prompt"][:-1])) == row["answer"]


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

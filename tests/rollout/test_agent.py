"""The agent rollout engine: calls run as written, observations appended outside the loss mask, replay."""
import json
import random

import pytest
import torch

from tests.rollout._scripted import ScriptedAgentEngine
from ttrl_lightning.data.cota import agent_prompts
from ttrl_lightning.models import load_model, load_tokenizer
from ttrl_lightning.rollout import RolloutEngine
from ttrl_lightning.rollout.agent import (
    AgentEngine,
    AgentRollouts,
    load_trajectories,
    replay_trajectory,
    save_trajectories,
)
from ttrl_lightning.rollout.base import SamplingParams, build_engine
from ttrl_lightning.tools import format_tool_call, run_tool
from ttrl_lightning.tools.agent_format import AgentPrompt, final_answer, observation_view
from ttrl_lightning.tools.protocol import OBSERVATION_END, OBSERVATION_START

pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen2")


@pytest.fixture(scope="module")
def model(tok):
    return load_model("tiny:qwen2", tok, tiny_kwargs={"max_pos": 1024})


def _prop_script(prompt, turn):
    if turn == 0:
        return "I look up it.\n" + format_tool_call("PROP", {"query": "circle"})
    return "Answer: red<eos>"


def test_agent_engine_is_a_rollout_engine_the_training_step_can_use(tok, model):
    """The agent engine meets the engine contract the GRPO step relies on: taken as it is by build_engine,
    samples from the policy it is handed (no own weights, so no importance correction and a no-op weight
    sync), and returns prompt-major rows, n per prompt, with a group index and one text per row."""
    engine = AgentEngine(tok, max_steps=1, max_turn_tokens=4)
    assert isinstance(engine, RolloutEngine) and build_engine(engine, tok) is engine
    assert not getattr(engine, "owns_weights", False) and engine.sync_weights(model) is None
    rows = agent_prompts(0, 2, ["shape"])
    ro = engine.generate(model, [r["prompt"] for r in rows], SamplingParams(n=3, seed=0))
    assert ro.n == 3 and ro.group.tolist() == [0, 0, 0, 1, 1, 1] and len(ro.texts) == 6
    assert ro.completion_ids.shape == ro.completion_mask.shape and len(ro.trajectories) == 6


def test_observation_tokens_are_attended_but_outside_the_loss_mask(tok, model):
    rows = agent_prompts(0, 2, ["shape"])
    engine = ScriptedAgentEngine(tok, _prop_script)
    ro = engine.generate(model, [r["prompt"] for r in rows], SamplingParams(n=2, seed=0))
    assert isinstance(ro, AgentRollouts) and ro.completion_ids.shape[0] == 4
    for r, traj in enumerate(ro.trajectories):
        assert [s["name"] for s in traj.steps] == ["PROP"]
        # the observation shown is the tool's artifact without masks, between <out> and </out>
        expected = observation_view(run_tool("PROP", {"query": "circle"}, image=rows[r // 2]["prompt"].image))
        assert f"{OBSERVATION_START}{expected}{OBSERVATION_END}" in traj.completion
        assert traj.answer == "red" and not traj.truncated
        n = int(ro.completion_attention[r].sum())
        ids = ro.completion_ids[r, :n].tolist()
        gen, obs = ro.completion_mask[r, :n].tolist(), ro.observation_mask[r, :n].tolist()
        (c0, c1, o0, o1), = ro.step_spans[r]
        shown = f"{OBSERVATION_START}{expected}{OBSERVATION_END}"
        assert tok.decode(ids[o0:o1], skip_special_tokens=False) == shown
        assert gen == [1] * o0 + [0] * (o1 - o0) + [1] * (n - o1)  # the model's tokens only
        assert obs == [1 - g for g in gen]
        assert tok.decode(ids[c0:c1]).endswith("</tool_call>")
    att = ro.attention_mask()
    assert att.shape == ro.input_ids().shape
    assert bool((att[:, ro.prompt_ids.shape[1]:] >= ro.completion_mask).all())


def test_trajectories_are_saved_and_replayed_byte_for_byte(tmp_path, tok, model):
    rows = agent_prompts(0, 1, ["read_small"])

    def script(prompt, turn):
        calls = [("OCR", {}), ("ZOOM", {"box": [0.0, 0.0, 1.0, 1.0], "scale": 2}), ("OCR", {"view": 0})]
        return format_tool_call(*calls[turn]) if turn < 3 else "Answer: X<eos>"

    ro = ScriptedAgentEngine(tok, script).generate(model, [rows[0]["prompt"]], SamplingParams(n=1))
    path = tmp_path / "traj.jsonl"
    save_trajectories(path, ro.trajectories)
    back = load_trajectories(path)
    assert back[0].steps == ro.trajectories[0].steps and len(back[0].steps) == 3
    assert replay_trajectory(back[0]) == []  # pixels redrawn from the source
    tampered = json.loads(path.read_text())
    tampered["steps"][2]["text"] = tampered["steps"][2]["text"].replace("1.0", "0.9", 1)
    from ttrl_lightning.rollout.agent import Trajectory
    assert replay_trajectory(Trajectory.from_json(tampered)) == [2]


GOOD = {"prompt": "q", "completion": "c", "answer": "1", "latencies": [0.1, None], "source": None,
        "disabled": ["OCR"], "truncated": False,
        "steps": [{"name": "OCR", "args": {}, "text": "{}"}, {"name": None, "args": {}, "text": "x"}]}


@pytest.mark.parametrize("change, message", [
    ({"disabled": "OCR"}, "field 'disabled' must be list, got str 'OCR'"),  # it became ('O', 'C', 'R')
    ({"disabled": [1]}, "field 'disabled' must be a list of tool names"),
    ({"prompt": None}, "field 'prompt' must be str"),
    ({"answer": 3}, "field 'answer' must be str or null"),
    ({"steps": {"name": "OCR"}}, "field 'steps' must be list"),
    ({"steps": [{"name": "OCR", "args": [], "text": "{}"}]}, r"steps\[0\]: name must be a string or null, args an"),
    ({"steps": ["OCR"]}, r"steps\[0\] must be an object with exactly name, args and text"),
    ({"latencies": ["1", None]}, r"latencies\[0\] must be a number or null"),
    ({"latencies": [float("nan"), None]}, r"latencies\[0\] must be a finite number of seconds >= 0, got nan"),
    ({"latencies": [0.1, float("inf")]}, r"latencies\[1\] must be a finite number of seconds >= 0, got inf"),
    ({"latencies": [-0.5, None]}, r"latencies\[0\] must be a finite number of seconds >= 0, got -0.5"),
    ({"latencies": [0.1]}, r"latencies has 1 entries for 2 steps"),
    ({"truncated": "no"}, "field 'truncated' must be bool"),
    ({"source": [1]}, "field 'source' must be dict or null"),
    ({"extra": 1}, r"unknown field\(s\) \['extra'\]"),
])
def test_bad_trajectory_fields_name_the_file_line_and_field(tmp_path, change, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **change}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl, line 2: not a trajectory record \\(" + message):
        load_trajectories(path)


def test_bad_trajectory_file_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "q"}\n')
    with pytest.raises(ValueError, match="bad.jsonl, line 1.*missing field 'completion'"):
        load_trajectories(path)
    for text, why in (("[1, 2]", "not a trajectory record"), ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                      ("12", "not a trajectory record"), ('{"prompt": "a", "prompt": "b"}', "given twice"),
                      ("\udcff", "not valid UTF-8")):
        path.write_text(text + "\n", errors="surrogateescape")
        with pytest.raises(ValueError, match=f"bad.jsonl, line 1: .*{why}"):
            load_trajectories(path)
    assert load_trajectories(_write(tmp_path / "good.jsonl", GOOD))[0].disabled == ("OCR",)


def _write(path, record):
    path.write_text(json.dumps(record) + "\n")
    return path


def test_step_budget_and_disabled_tools(tok, model):
    rows = agent_prompts(0, 1, ["count"])
    call = format_tool_call("SEG", {"query": "objects"})
    ro = ScriptedAgentEngine(tok, lambda p, t: call, max_steps=2).generate(
        model, [rows[0]["prompt"]], SamplingParams(n=1))
    traj = ro.trajectories[0]
    assert len(traj.steps) == 2 and traj.truncated and traj.answer is None
    ro = ScriptedAgentEngine(tok, _prop_script, disabled=("PROP",)).generate(
        model, [rows[0]["prompt"]], SamplingParams(n=1))
    assert ro.trajectories[0].errors == ["disabled"] and ro.trajectories[0].disabled == ("PROP",)


def test_memoised_tool_results_are_identical_and_not_timed(tok, model):
    rows = agent_prompts(0, 1, ["count"])
    engine = ScriptedAgentEngine(tok, lambda p, t: format_tool_call("SEG", {"query": "objects"}) if t == 0
                                 else "Answer: 1<eos>")
    ro = engine.generate(model, [rows[0]["prompt"]], SamplingParams(n=3))
    texts = {t.steps[0]["text"] for t in ro.trajectories}
    assert len(texts) == 1 and engine.cache.misses == 1 and engine.cache.hits == 2
    assert sum(t.latencies[0] is not None for t in ro.trajectories) == 1


def test_fuzzed_call_text_never_crashes_the_rollout(tok, model):
    rng = random.Random(0)
    pieces = ['<tool_call>', '</tool_call>', '{', '}', '"name"', ':', '"ZOOM"', '"arguments"', '[', ']',
              '1e999', '"box"', '-1', '0.5', ',', 'null', 'true', '"view"', '"OCR"', '"frame"', '99',
              '\\u0000', '{"a":' * 9]
    rows = agent_prompts(0, 2, ["count", "when"])

    def script(prompt, turn):
        body = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        return body + "</tool_call>" if turn < 3 else "Answer: 0<eos>"

    ro = ScriptedAgentEngine(tok, script, max_steps=3).generate(
        model, [r["prompt"] for r in rows], SamplingParams(n=4))
    steps = [s for t in ro.trajectories for s in t.steps]
    assert len(steps) == 8 * 3
    assert all(isinstance(json.loads(s["text"]), dict) for s in steps)


def test_real_model_turns_are_its_samples(tok, model):
    # an untrained model: whatever it writes, the engine returns well-formed rollouts, reproducibly
    prompts = [AgentPrompt("Q: hi\n")]
    a = AgentEngine(tok, max_steps=1, max_turn_tokens=8).generate(model, prompts, SamplingParams(n=2, seed=3))
    b = AgentEngine(tok, max_steps=1, max_turn_tokens=8).generate(model, prompts, SamplingParams(n=2, seed=3))
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert bool((a.completion_mask == a.completion_attention).all())  # no call: every token is the model's


def test_final_answer_reads_after_the_last_observation():
    assert final_answer("Answer: no<out>{}</out>ok\nAnswer: red") == "red"
    assert final_answer("<out>Answer: 3</out>thinking") is None
    assert final_answer("Answer:   ") is None


def test_a_context_without_room_for_another_turn_ends_the_row(tok):
    small = load_model("tiny:qwen2", tok, tiny_kwargs={"max_pos": 256})
    rows = agent_prompts(0, 1, ["count"])
    call = "x" * 60 + format_tool_call("SEG", {"query": "objects"})
    engine = ScriptedAgentEngine(tok, lambda p, t: call, max_steps=4, max_turn_tokens=64)
    ro = engine.generate(small, [rows[0]["prompt"]], SamplingParams(n=1))
    traj = ro.trajectories[0]
    assert traj.truncated and 1 <= len(traj.steps) < 4
    assert max(engine.context_lengths) + 64 <= 256  # no turn started without room for 64 new tokens


def test_calls_are_found_when_the_tool_call_tags_are_special_tokens(model):
    # Qwen's tokenizers have <tool_call> / </tool_call> as special tokens: decoding must keep them
    from ttrl_lightning.models import SPECIAL_TOKENS, build_char_tokenizer

    qtok = build_char_tokenizer(specials=[*SPECIAL_TOKENS, "<tool_call>", "</tool_call>"])
    assert len(qtok("<tool_call>", add_special_tokens=False)["input_ids"]) == 1
    big = load_model("tiny:qwen2", qtok, tiny_kwargs={"max_pos": 1024})
    rows = agent_prompts(0, 1, ["shape"])
    ro = ScriptedAgentEngine(qtok, _prop_script).generate(big, [rows[0]["prompt"]], SamplingParams(n=1))
    assert [s["name"] for s in ro.trajectories[0].steps] == ["PROP"] and ro.trajectories[0].answer == "red"


def test_first_per_group_keeps_the_rows_observations_and_trajectories(tok, model):
    rows = agent_prompts(0, 2, ["shape"])
    script = lambda prompt, turn: "Answer: red<eos>" if "square" in prompt else _prop_script(prompt, turn)  # noqa: E731
    ro = ScriptedAgentEngine(tok, script, record_signals=True).generate(
        model, [r["prompt"] for r in rows], SamplingParams(n=3, seed=0))
    sub = ro.first_per_group(2)
    assert isinstance(sub, AgentRollouts) and sub.n == 2 and sub.group.tolist() == [0, 0, 1, 1]
    for i, r in enumerate([0, 1, 3, 4]):
        n = int(ro.completion_attention[r].sum())
        assert sub.trajectories[i] is ro.trajectories[r] and sub.step_spans[i] == ro.step_spans[r]
        assert sub.texts[i] == ro.texts[r]
        assert torch.equal(sub.completion_ids[i, :n], ro.completion_ids[r, :n])
        for name in ("completion_mask", "completion_attention", "observation_mask"):
            assert torch.equal(getattr(sub, name)[i, :n], getattr(ro, name)[r, :n])
            assert int(getattr(sub, name)[i, n:].sum()) == 0
        assert torch.equal(sub.signals["logprob"][i, :n].isnan(), ro.signals["logprob"][r, :n].isnan())
    assert sub.completion_ids.shape[1] == int(sub.completion_attention.sum(1).max())
    with pytest.raises(ValueError, match="k must be"):
        ro.first_per_group(4)


def test_recorded_signals_are_the_replay_of_the_model_tokens_with_observations_in_context(tok, model):
    rows = agent_prompts(0, 1, ["shape"])
    ro = ScriptedAgentEngine(tok, _prop_script, record_signals=True).generate(
        model, [rows[0]["prompt"]], SamplingParams(n=1, seed=0))
    gen = ro.completion_mask.bool()
    assert bool(ro.observation_mask.any())
    for name in ("logprob", "entropy"):
        assert bool(ro.signals[name][gen].isfinite().all()) and bool(ro.signals[name][~gen].isnan().all())
    # oracle: one full float64 forward over prompt + completion, the observations attended
    ids, attn = ro.input_ids(), ro.attention_mask()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
    P = ro.prompt_ids.shape[1]
    logp = torch.log_softmax(logits.double()[:, P - 1:-1], -1)
    ref_lp = logp.gather(-1, ro.completion_ids[..., None])[..., 0]
    ref_h = -(logp.exp() * logp).sum(-1)
    assert torch.allclose(ro.signals["logprob"][gen].double(), ref_lp[gen], atol=1e-4)
    assert torch.allclose(ro.signals["entropy"][gen].double(), ref_h[gen], atol=1e-4)

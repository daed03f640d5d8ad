"""CoTA traces: thought + <tool_call>{json}</tool_call> + observation per step, observations without loss."""
import json

import pytest

from ttrl_lightning.data.cota import (
    CoTADataModule,
    agent_prompts,
    cota_trace,
    generate_cota_traces,
    text_chain,
)
from ttrl_lightning.data.datamodules import encode_trace
from ttrl_lightning.data.scenes import SCENE_TASKS
from ttrl_lightning.masking import IGNORE_INDEX
from ttrl_lightning.models import load_tokenizer
from ttrl_lightning.rollout.agent_format import final_answer
from ttrl_lightning.tools import parse_tool_call, run_tool
from ttrl_lightning.tools.protocol import OBSERVATION_END, OBSERVATION_START

pytest.importorskip("cv2")


def test_trace_steps_are_thought_call_observation_and_the_answer():
    task = SCENE_TASKS["count"](0, 2)
    segs = cota_trace(task)
    assert [s.kind for s in segs] == ["prompt", "text", "action", "observation", "text"]
    name, args = parse_tool_call(segs[2].text)
    assert (name, args) == task.chain[0]
    obs = json.loads(segs[3].text[len(OBSERVATION_START):-len(OBSERVATION_END)])
    truth = run_tool(name, args, image=task.image).artifact
    assert obs["count"] == truth["count"] == int(task.answer)
    assert all("mask" not in o for o in obs["objects"]) and all("mask" in o for o in truth["objects"])
    assert final_answer("".join(s.text for s in segs[1:]).replace("<eos>", "")) == task.answer


def test_observation_tokens_carry_no_loss_and_calls_are_actions():
    tok = load_tokenizer("tiny:qwen2")
    segs = cota_trace(SCENE_TASKS["colour"](0, 1))
    enc = encode_trace(tok, segs)
    ids, labels, act, span = enc["input_ids"], enc["labels"], enc["action_mask"], enc["observation_span"]
    obs_text = segs[3].text[len(OBSERVATION_START):-len(OBSERVATION_END)]
    in_obs = [i for i, s in enumerate(span) if s == 1]
    assert tok.decode([ids[i] for i in in_obs]) == obs_text
    assert all(labels[i] == IGNORE_INDEX for i in in_obs)
    assert tok.decode([ids[i] for i, a in enumerate(act) if a]) == segs[2].text
    trained = sum(len(tok(s.text, add_special_tokens=False)["input_ids"]) for s in segs
                  if s.kind in ("text", "action"))
    assert sum(label != IGNORE_INDEX for label in labels) == trained


def test_read_small_for_a_text_agent_zooms_on_the_span_ocr_found():
    task = SCENE_TASKS["read_small"](0, 4)
    assert [n for n, _ in text_chain(task)] == ["OCR", "ZOOM", "OCR"]
    segs = cota_trace(task)
    calls = [parse_tool_call(s.text) for s in segs if s.kind == "action"]
    first_obs = json.loads(segs[3].text[len(OBSERVATION_START):-len(OBSERVATION_END)])
    assert calls[1][1]["box"] == first_obs["spans"][0]["box"]
    assert calls[2] == ("OCR", {"view": 0})
    assert segs[-1].text == f"Answer: {task.answer}<eos>"


def test_every_kind_has_a_trace_and_traces_are_deterministic():
    kinds = [k for k in SCENE_TASKS.names() if k not in ("read", "read_small")]  # OCR kinds: slow, above
    a = generate_cota_traces(3, len(kinds), kinds)
    assert [parse_tool_call(s.text)[0] for t in a for s in t if s.kind == "action"] == \
        [SCENE_TASKS[k](3, i).chain[0][0] for i, k in enumerate(kinds)]
    assert [[s.text for s in t] for t in a] == [[s.text for s in cota_trace(SCENE_TASKS[k](3, i))]
                                               for i, k in enumerate(kinds)]


def test_datamodule_and_prompts():
    tok = load_tokenizer("tiny:qwen2")
    dm = CoTADataModule(kinds=["count", "shape"], n_train=4, n_val=2, batch_size=2, tokenizer=tok)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 2 and bool(batch["action_mask"].any())
    rows = agent_prompts(5, 2, ["when"])
    assert rows[0]["prompt"].source == {"kind": "when", "seed": 5, "index": 0}
    assert rows[0]["prompt"].frames is not None and rows[0]["answer"] == SCENE_TASKS["when"](5, 0).answer
    with pytest.raises(KeyError, match="nope"):
        agent_prompts(0, 1, ["nope"])

"""CoTA traces: thought + <tool_call>{json}</tool_call> + observation per step, observations without loss."""
import json

import pytest
import torch

from ttrl_lightning.data.cota import (
    CoTADataModule,
    agent_prompts,
    cota_trace,
    generate_cota_traces,
    text_chain,
)
from ttrl_lightning.data.datamodules import encode_trace
from ttrl_lightning.data.scenes import SCENE_TASKS, tool_kinds
from ttrl_lightning.masking import IGNORE_INDEX
from ttrl_lightning.models import load_tokenizer
from ttrl_lightning.tools import parse_tool_call, run_tool
from ttrl_lightning.tools.agent_format import final_answer
from ttrl_lightning.tools.protocol import OBSERVATION_END, OBSERVATION_START

pytest.importorskip("cv2")


def test_trace_steps_are_thought_call_observation_and_the_answer():
    task = SCENE_TASKS["count"](0, 2)
    segs = cota_trace(task)
    assert [s.kind for s in segs] == ["image", "prompt", "text", "action", "observation", "text"]
    assert segs[0].image is task.image  # shown to a VLM before the question
    name, args = parse_tool_call(segs[3].text)
    assert (name, args) == task.chain[0]
    obs = json.loads(segs[4].text[len(OBSERVATION_START):-len(OBSERVATION_END)])
    truth = run_tool(name, args, image=task.image).artifact
    assert obs["count"] == truth["count"] == int(task.answer)
    assert all("mask" not in o for o in obs["objects"]) and all("mask" in o for o in truth["objects"])
    assert final_answer("".join(s.text for s in segs[2:]).replace("<eos>", "")) == task.answer


def test_observation_tokens_carry_no_loss_and_calls_are_actions():
    tok = load_tokenizer("tiny:qwen2")
    segs = cota_trace(SCENE_TASKS["colour"](0, 1))
    enc = encode_trace(tok, segs)
    ids, labels, act, span = enc["input_ids"], enc["labels"], enc["action_mask"], enc["observation_span"]
    obs_text = segs[4].text[len(OBSERVATION_START):-len(OBSERVATION_END)]
    in_obs = [i for i, s in enumerate(span) if s == 1]
    assert tok.decode([ids[i] for i in in_obs]) == obs_text
    assert all(labels[i] == IGNORE_INDEX for i in in_obs)
    assert tok.decode([ids[i] for i, a in enumerate(act) if a]) == segs[3].text
    assert "images" not in enc and tok.decode(ids).startswith("Q:")  # a text model does not see the image
    trained = sum(len(tok(s.text, add_special_tokens=False)["input_ids"]) for s in segs
                  if s.kind in ("text", "action"))
    assert sum(label != IGNORE_INDEX for label in labels) == trained


def test_read_small_for_a_text_agent_zooms_on_the_span_ocr_found():
    task = SCENE_TASKS["read_small"](0, 4)
    assert [n for n, _ in text_chain(task)] == ["OCR", "ZOOM", "OCR"]
    segs = cota_trace(task)
    calls = [parse_tool_call(s.text) for s in segs if s.kind == "action"]
    first_obs = json.loads(segs[4].text[len(OBSERVATION_START):-len(OBSERVATION_END)])
    assert calls[1][1]["box"] == first_obs["spans"][0]["box"]
    assert calls[2] == ("OCR", {"view": 0})
    assert segs[-1].text == f"Answer: {task.answer}<eos>"


def test_every_kind_has_a_trace_and_traces_are_deterministic():
    kinds = [k for k in tool_kinds() if k not in ("read", "read_small")]  # OCR kinds: slow, above
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
    assert rows[0]["prompt"].frames is not None and rows[0]["gold"] == SCENE_TASKS["when"](5, 0).answer
    with pytest.raises(KeyError, match="nope"):
        agent_prompts(0, 1, ["nope"])


def test_vlm_traces_show_the_image_and_the_zoom_crop_where_the_agent_engine_does():
    """A VLM's CoTA trace and the agent engine's rollout of the same calls are the same token sequence:
    the task image before the question, the crop after ZOOM's observation."""
    from tests.rollout._scripted import ScriptedAgentEngine
    from ttrl_lightning.data.datamodules import collate_traces
    from ttrl_lightning.models import load_model, load_processor
    from ttrl_lightning.rollout.base import SamplingParams

    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    task = SCENE_TASKS["read_small"](0, 4)
    segs = cota_trace(task, tok.eos_token)
    assert [s.kind for s in segs].count("image") == 2  # the scene and the crop
    enc = encode_trace(tok, segs, proc)
    assert len(enc["images"]) == 2
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert all(label == IGNORE_INDEX for i, label in zip(enc["input_ids"], enc["labels"]) if i == pad)
    turns = ["".join(s.text for s in segs[i:i + 2]) for i, s in enumerate(segs) if s.kind == "text"]
    rows = agent_prompts(0, 5, ["read_small"])[4:]
    model = load_model("tiny:qwen2_vl", tok, tiny_kwargs={"max_pos": 2048})
    ro = ScriptedAgentEngine(tok, lambda prompt, turn: turns[turn], processor=proc).generate(
        model, [rows[0]["prompt"]], SamplingParams(n=1))
    rolled = ro.input_ids()[0][ro.attention_mask()[0].bool()].tolist()
    assert rolled == enc["input_ids"]
    for got, want in zip(ro.images[0], enc["images"]):
        assert torch.equal(got.pixel_values, want.pixel_values)
    batch = collate_traces([enc, enc], tok.pad_token_id, max_length=4096)
    assert batch["pixel_values"].shape[0] == 2 * sum(int(b.grid_thw.prod()) for b in enc["images"])
    assert torch.equal(batch["mm_token_type_ids"].bool(), batch["input_ids"] == pad)
    with pytest.raises(ValueError, match="max_length"):
        collate_traces([enc], tok.pad_token_id, max_length=64)


@pytest.mark.parametrize("options, message", [
    ({"n_calibration": -1}, "n_calibration must be an integer in [0, 100000], got -1"),
    ({"n_train": 0}, "n_train must be an integer in [1, 100000], got 0"),  # was a traceback from draw_splits
    ({"n_train": 10**400}, "n_train must be an integer in [1, 100000], got an integer of about 401 digits"),
    ({"batch_size": 0}, "batch_size must be an integer in [1, 100000], got 0"),
    ({"seed": -1}, "seed must be an integer >= 0, got -1"),
    ({"kinds": "count"}, "kinds must be a list of task names, got str"),
    ({"kinds": ["nosuch"]}, "kinds: unknown scene task 'nosuch'"),
])
def test_agent_prompt_sizes_are_checked_when_the_data_module_is_built(options, message):
    from ttrl_lightning.data.cota import AgentPromptDataModule
    from ttrl_lightning.errors import UserError

    with pytest.raises(UserError) as e:
        AgentPromptDataModule(**options)
    assert str(e.value).startswith(f"AgentPromptDataModule argument {message}")


def test_agent_prompts_without_a_validation_split(capsys):
    """``n_val: 0``: no validation tasks (the split drawing refused a split of 0 with a traceback)."""
    from ttrl_lightning.data.cota import AgentPromptDataModule

    dm = AgentPromptDataModule(kinds=["count"], n_train=2, n_val=0, batch_size=2)
    dm.setup()
    assert len(dm._train) == 2 and dm._val == [] and not list(dm.val_dataloader())


def test_ttrl_fit_says_a_bad_agent_data_size_in_one_line(tmp_path, monkeypatch, capsys):
    from ttrl_lightning.cli import main
    from ttrl_lightning.cli.configs import config_path

    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    rc = main(["fit", "--config", config_path("ttrl/tiny_agent_pixel.yaml"),
               "--model.init_args.policy.model=tiny:llama",
               f"--trainer.default_root_dir={tmp_path / 'run'}", "--data.init_args.n_calibration=-1"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("ttrl fit: AgentPromptDataModule argument n_calibration must be "
                                            "an integer in [0, 100000], got -1")

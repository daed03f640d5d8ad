"""The agent engine's VLM path: the task image before the question and every ZOOM crop after its observation
as vision tokens (observations: attended, never trained on), and the training pass over those rows equals a
single-row forward built independently."""
import math

import lightning.pytorch as pl
import pytest
import torch

from tests.rollout._scripted import ScriptedAgentEngine
from ttrl_lightning.data.cota import AgentPromptDataModule, agent_prompts
from ttrl_lightning.models import load_model, load_processor, load_tokenizer, vision_block
from ttrl_lightning.rollout.agent import AgentEngine
from ttrl_lightning.rollout.base import SamplingParams
from ttrl_lightning.tools import format_tool_call, run_tool
from ttrl_lightning.modules.specs import GRPOSpec

pytest.importorskip("cv2")
ZOOM = {"box": [0.0, 0.0, 0.5, 0.5], "scale": 2}


@pytest.fixture(scope="module")
def vl():
    tok = load_tokenizer("tiny:qwen2_vl")
    return tok, load_processor("tiny:qwen2_vl"), load_model("tiny:qwen2_vl", tok, tiny_kwargs={"max_pos": 2048})


def _zoom_script(prompt, turn):
    return "zoom.\n" + format_tool_call("ZOOM", ZOOM) if turn == 0 else "Answer: a<eos>"


def test_image_and_zoom_crop_are_shown_as_vision_tokens(vl):
    tok, proc, model = vl
    rows = agent_prompts(0, 2, ["read_small", "direction"])
    ro = ScriptedAgentEngine(tok, _zoom_script, processor=proc).generate(
        model, [r["prompt"] for r in rows], SamplingParams(n=1, seed=0))
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    for r, row in enumerate(rows):
        image = row["prompt"].image if row["prompt"].image is not None else row["prompt"].frames[0]
        crop = run_tool("ZOOM", ZOOM, image=image).view
        expect = [vision_block(proc, image), vision_block(proc, crop)]
        assert [b.ids for b in ro.images[r]] == [b.ids for b in expect]
        for got, want in zip(ro.images[r], expect):
            assert torch.equal(got.pixel_values, want.pixel_values) and torch.equal(got.grid_thw, want.grid_thw)
        p = ro.prompt_ids[r][ro.prompt_mask[r].bool()].tolist()
        assert p[:len(expect[0].ids)] == list(expect[0].ids)  # the image, then the question
        (c0, c1, o0, o1), = ro.step_spans[r]
        comp = ro.completion_ids[r].tolist()
        assert comp[o1 - len(expect[1].ids):o1] == list(expect[1].ids)  # the crop closes the observation
        assert ro.observation_mask[r, o0:o1].all() and not ro.completion_mask[r, o0:o1].any()
        assert comp.count(pad) == sum(int(g.prod()) // 4 for g in (expect[1].grid_thw,))
    inputs = ro.forward_inputs()
    assert inputs["pixel_values"].shape[0] == sum(int(b.grid_thw.prod()) for row in ro.images for b in row)
    assert torch.equal(inputs["mm_token_type_ids"].bool(), inputs["input_ids"] == pad)


def test_training_pass_equals_an_independent_single_row_forward(vl):
    tok, proc, model = vl
    rows = agent_prompts(0, 2, ["read_small", "count"])
    ro = ScriptedAgentEngine(tok, _zoom_script, processor=proc).generate(
        model, [r["prompt"] for r in rows], SamplingParams(n=2, seed=0))
    model.eval()
    with torch.no_grad():
        batched = torch.log_softmax(model(**ro.forward_inputs()).logits.double(), -1)
        P = ro.prompt_ids.shape[1]
        for r in range(ro.completion_ids.shape[0]):
            keep = ro.attention_mask()[r].bool()
            ids = ro.input_ids()[r][keep][None]
            blocks = ro.images[r]
            alone = model(input_ids=ids, pixel_values=torch.cat([b.pixel_values for b in blocks]),
                          image_grid_thw=torch.cat([b.grid_thw for b in blocks]),
                          mm_token_type_ids=(ids == blocks[0].token_id).long()).logits.double()
            alone = torch.log_softmax(alone, -1)[0]
            pos = keep.nonzero().squeeze(1)  # the row's real positions in the padded batch
            assert torch.allclose(batched[r, pos], alone, atol=1e-5)
    assert P > 0


def test_sampled_vlm_trajectories_are_well_formed(vl):
    tok, proc, model = vl
    rows = agent_prompts(0, 2, ["shape", "when"])
    eng = AgentEngine(tok, max_steps=1, max_turn_tokens=8, processor=proc)
    a = eng.generate(model, [r["prompt"] for r in rows], SamplingParams(n=2, seed=1))
    b = eng.generate(model, [r["prompt"] for r in rows], SamplingParams(n=2, seed=1))
    assert torch.equal(a.completion_ids, b.completion_ids) and len(a.images) == 4
    assert all(len(row) >= 1 for row in a.images)  # at least the task's image


def test_ccrft_trains_a_vlm_agent_one_step(tmp_path):
    from ttrl_lightning.modules import CCRFTModule, PolicySpec

    spec = PolicySpec(model="tiny:qwen2_vl", tiny_kwargs={"max_pos": 2048}, lr=1e-2)
    m = CCRFTModule(policy=spec, num_generations=2, curiosity_coherence={"embed_hidden": 16, "embed_dim": 8},
                    grpo=GRPOSpec(reference="initial", kl_coef=0.05))
    assert m.engine.processor is not None  # the policy's processor was found
    m.configure_model()
    m.engine = ScriptedAgentEngine(m.tokenizer, _zoom_script, processor=m.engine.processor)
    before = {k: v.clone() for k, v in m.policy.state_dict().items()}
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(m, AgentPromptDataModule(kinds=["read_small"], n_train=2, n_val=1, batch_size=2))
    metrics = trainer.callback_metrics
    assert all(math.isfinite(float(metrics[f"train/{k}"])) for k in ("curiosity", "coherence", "loss", "kl"))
    changed = {k for k, v in m.policy.state_dict().items() if not torch.equal(before[k], v)}
    # the images reached the training forward: the vision tower has gradients and moved, as the LM did
    assert any(".visual." in f".{k}" for k in changed), sorted(changed)[:5]
    assert any(".visual." not in f".{k}" for k in changed)


def test_a_vlm_never_writes_vision_tokens_itself(vl):
    tok, proc, model = vl
    eng = AgentEngine(tok, max_steps=1, max_turn_tokens=48, processor=proc)
    vision = [tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")]
    assert set(vision) <= set(eng.suppressed)
    with torch.no_grad():  # make the untrained model prefer the image token everywhere
        saved = model.get_output_embeddings().weight.clone()
        model.get_output_embeddings().weight[vision[2]] += 50.0
    try:
        rows = agent_prompts(0, 1, ["shape"])
        ro = eng.generate(model, [rows[0]["prompt"]], SamplingParams(n=2, seed=0))
    finally:
        with torch.no_grad():
            model.get_output_embeddings().weight.copy_(saved)
    written = ro.completion_ids[ro.completion_mask.bool()]
    assert written.numel() and not bool(torch.isin(written, torch.tensor(vision)).any())
    model(**ro.forward_inputs())  # image tokens and features agree

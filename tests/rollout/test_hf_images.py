"""The HF engine on image prompts (tiny Qwen2-VL / Qwen2.5-VL): prompt-shared sampling against ``generate``
(the same tokens up to the first finished row, M-RoPE continued right), each prompt prefilled once instead
of n times, placeholders never sampled, and the rows' images on ``Rollouts.images``."""
import pytest
import torch

from ttrl_lightning.data.questions import read_questions
from ttrl_lightning.generate.scene_questions import write_scene_questions
from ttrl_lightning.models import load_model, load_processor, load_tokenizer
from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams
from ttrl_lightning.rollout.requests import PromptRenderer, SamplingRequest


@pytest.fixture(scope="module")
def scene_questions(tmp_path_factory):
    return read_questions(write_scene_questions(str(tmp_path_factory.mktemp("scenes")), 2, seed=7,
                                                kinds=["colour", "shape"]))


def _setup(arch, questions):
    tok, proc = load_tokenizer(f"tiny:{arch}"), load_processor(f"tiny:{arch}")
    model = load_model(f"tiny:{arch}", tok, seed=0)
    prompts = PromptRenderer(tok, proc).render([SamplingRequest(q["prompt"], q["images"]) for q in questions])
    return tok, proc, model, prompts


def _vision_patches(model):
    """Patches the vision tower encodes, per call (a forward pre-hook on it)."""
    seen = []
    model.model.visual.register_forward_pre_hook(lambda mod, args, kw: seen.append(int(args[0].shape[0])),
                                                 with_kwargs=True)
    return seen


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_vlm_prompt_sharing_draws_generates_tokens_until_a_row_finishes(arch, scene_questions):
    tok, proc, model, prompts = _setup(arch, scene_questions)
    p = SamplingParams(n=6, temperature=0.9, top_k=30, top_p=0.95, max_new_tokens=24, seed=5)
    agreed = 0
    for prompt in prompts:  # one prompt a call: generate samples prompt by prompt, so the RNGs line up
        plain = HFGenerateEngine(tok, processor=proc, share_prompt=False).generate(model, [prompt], p)
        shared = HFGenerateEngine(tok, processor=proc).generate(model, [prompt], p)
        first = int(min(plain.completion_mask.sum(1).min(), shared.completion_mask.sum(1).min()))
        assert first >= 1
        assert torch.equal(plain.completion_ids[:, :first], shared.completion_ids[:, :first])
        agreed += first
        assert [len(row) for row in shared.images] == [1] * p.n
        assert torch.equal(shared.prompt_ids, plain.prompt_ids)
    assert agreed >= 10  # long enough that wrong M-RoPE positions would have shown
    greedy = SamplingParams(n=2, temperature=0.0, max_new_tokens=16)
    g_plain = HFGenerateEngine(tok, processor=proc, share_prompt=False).generate(model, prompts, greedy)
    g_shared = HFGenerateEngine(tok, processor=proc).generate(model, prompts, greedy)
    assert torch.equal(g_plain.completion_ids, g_shared.completion_ids) and g_plain.texts == g_shared.texts


def test_vlm_prompt_sharing_prefills_each_prompt_once_not_n_times(scene_questions):
    """The prompt (image tokens included) goes through the decoder once per question, not once per sample;
    the vision tower encodes each image once (so does this transformers' generate)."""
    from PIL import Image

    tok, proc, model, prompts = _setup("qwen2_vl", scene_questions)
    n = 8
    p = SamplingParams(n=n, max_new_tokens=4, seed=1)
    patches = _vision_patches(model)
    tokens = []
    model.get_input_embeddings().register_forward_hook(lambda mod, args, out: tokens.append(args[0].numel()))
    HFGenerateEngine(tok, processor=proc, share_prompt=False).generate(model, prompts, p)
    plain_tokens, tokens[:] = list(tokens), []
    plain_patches, patches[:] = list(patches), []
    ro = HFGenerateEngine(tok, processor=proc).generate(model, prompts, p)
    lengths = ro.prompt_mask[::n].sum(1).tolist()  # each prompt's tokens
    grids = [int(proc(text=["<|vision_start|><|image_pad|><|vision_end|>"],
                      images=[[Image.open(q["images"][0]).convert("RGB")]])["image_grid_thw"].prod())
             for q in scene_questions]
    assert patches == grids and plain_patches == grids  # each image encoded once either way
    firsts = [t for t in tokens if t > n]  # the prefills (every decode step feeds at most n tokens)
    assert firsts == lengths  # shared: each prompt once
    assert [t for t in plain_tokens if t > n] == [n * k for k in lengths]  # generate: n copies of each


def test_vlm_samples_never_write_image_placeholders(scene_questions):
    tok, proc, model, prompts = _setup("qwen2_vl", scene_questions)
    pad = tok.convert_tokens_to_ids("<|image_pad|>")

    def favour_placeholder(module, args, out):  # the placeholder becomes by far the likeliest next token
        out = out.clone()
        out[..., pad] += 50.0
        return out

    model.lm_head.register_forward_hook(favour_placeholder)
    p = SamplingParams(n=4, temperature=3.0, max_new_tokens=8, seed=0)
    for share in (True, False):
        ro = HFGenerateEngine(tok, processor=proc, share_prompt=share).generate(model, prompts, p)
        assert not bool((ro.completion_ids[ro.completion_mask.bool()] == pad).any())

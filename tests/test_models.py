"""Model loading (tiny configs, local checkpoints, LoRA) and the HF rollout engine."""
import pytest
import torch

from ttrl_lightning.data.datamodules import collate_traces, encode_trace
from ttrl_lightning.data.tasks import Segment, generate_prompts
from ttrl_lightning.models import build_char_tokenizer, load_model, load_tokenizer
from ttrl_lightning.modules import GRPOModule
from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams
from ttrl_lightning.rollout.hf import completion_mask_at_eos


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_char_tokenizer_round_trip(tok):
    text = "12+7=<call>add(12,7)</call><out>19</out>19"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids)[5] == "<call>"


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_tiny_models_and_local_checkpoint(arch, tok, tmp_path):
    m = load_model(f"tiny:{arch}", tok, seed=3)
    m2 = load_model(f"tiny:{arch}", tok, seed=3)
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)  # same seed, same weights
    m.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    for (k, a), b in zip(m.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), k
    tok2 = load_tokenizer(str(tmp_path))
    assert tok2("3+4=", add_special_tokens=False)["input_ids"] == tok("3+4=", add_special_tokens=False)["input_ids"]
    x = torch.tensor([[10, 11, 12]])
    torch.testing.assert_close(m(x).logits, loaded(x).logits)


def test_lora_trains_only_adapters(tok):
    m = load_model("tiny:qwen2", tok, lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_encode_trace_masks(tok):
    segs = [Segment("3+4=", "prompt"), Segment("<call>add(3,4)</call>", "action"), Segment("<out>7</out>", "observation"),
            Segment("7<eos>", "text")]
    enc = encode_trace(tok, segs)
    toks = tok.convert_ids_to_tokens(enc["input_ids"])
    assert toks == ["3", "+", "4", "=", "<call>", "a", "d", "d", "(", "3", ",", "4", ")", "</call>", "<out>", "7",
                    "</out>", "7", "<eos>"]
    assert enc["action_mask"] == [0] * 4 + [1] * 10 + [0] * 5
    assert enc["loss_mask"] == [0] * 4 + [1] * 10 + [0] * 3 + [1, 1]
    assert enc["obs_span"] == [0] * 15 + [1] + [0] * 3
    batch = collate_traces([enc, encode_trace(tok, segs[:2])], pad_id=tok.pad_token_id)
    assert batch["labels"].shape == (2, 19) and batch["labels"][1, 14:].eq(-100).all()


def test_completion_mask_at_eos():
    ids = torch.tensor([[5, 1, 7, 1], [5, 6, 7, 8]])
    assert completion_mask_at_eos(ids, 1).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_engine_groups_stops_and_seeds(tok):
    model = load_model("tiny:qwen2", tok, seed=0)
    eng = HFGenerateEngine(tok, record_signals=True)
    prompts = ["12+7=", "3-1=", "9+9="]
    p = SamplingParams(n=4, temperature=1.0, top_k=20, top_p=0.9, max_new_tokens=10, stop=("5",), seed=11)
    r = eng.generate(model, prompts, p)
    assert r.completion_ids.shape[0] == 12 and r.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert all(t.count("5") <= 1 and ("5" not in t or t.endswith("5")) for t in r.texts)  # cut at the stop string
    r2 = eng.generate(model, prompts, p)
    assert torch.equal(r.completion_ids, r2.completion_ids) and r.texts == r2.texts  # seeded
    r3 = eng.generate(model, prompts, SamplingParams(n=4, max_new_tokens=10, seed=12))
    assert not torch.equal(r3.completion_ids, r.completion_ids)
    greedy = eng.generate(model, prompts, SamplingParams(n=2, temperature=0.0, max_new_tokens=6))
    assert torch.equal(greedy.completion_ids[0], greedy.completion_ids[1])
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)


def test_generate_signals_match_training_logprobs(tok):
    """Log-probs recorded by ``generate`` (KV cache, left padding) equal a fresh forward of the module."""
    module = GRPOModule(model="tiny:qwen2", temperature=1.0, num_generations=3, max_new_tokens=8)
    module.configure_model()
    eng = HFGenerateEngine(module.tokenizer, record_signals=True)
    r = eng.generate(module.policy, ["1+1=", "17-12="], SamplingParams(n=3, max_new_tokens=8, seed=0))
    with torch.no_grad():
        lp = module.sequence_logprobs(module.policy, r)
    m = r.completion_mask.bool()
    torch.testing.assert_close(lp[m], r.signals["logprob"][m], atol=1e-4, rtol=1e-4)
    assert (r.signals["entropy"][m] > 0).all()


def test_generated_prompts_are_correct():
    for row in generate_prompts("arith3", 50, seed=1, ops="+-"):
        assert str(eval(row["prompt"][:-1])) == row["answer"]
    for row in generate_prompts("arith", 50, seed=1):
        assert str(eval(row["prompt"][:-1])) == row["answer"]


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_replay_signals_through_fused_op_match_generate_logits(tok, backend):
    """The seam to ``ttrl_lightning.ops.token_stats``: replayed signals equal those from generate's logits."""
    model = load_model("tiny:qwen2", tok, seed=0)
    p = SamplingParams(n=2, max_new_tokens=7, seed=5)
    a = HFGenerateEngine(tok, record_signals=True).generate(model, ["12+7=", "3-1="], p)
    b = HFGenerateEngine(tok, record_signals=True, signal_source="replay", signal_backend=backend).generate(
        model, ["12+7=", "3-1="], p)
    assert torch.equal(a.completion_ids, b.completion_ids)
    m = a.completion_mask.bool()
    for k in ("logprob", "entropy"):
        torch.testing.assert_close(b.signals[k][m], a.signals[k][m], atol=1e-4, rtol=1e-4)
    # self-certainty = KL(U || p) >= 0, checked against the logits definition on one token
    assert (b.signals["self_certainty"][m] >= -1e-5).all()

"""HFGenerateEngine (rollout/hf.py): grouping, stop strings and seeds; per-token signals against a full forward;
the package's padding convention (NaN outside the completion mask)."""
from __future__ import annotations

import pytest
import torch

from tests.rollout._full_forward import full_forward_signals
from ttrl_lightning.masking import completion_mask_at_eos
from ttrl_lightning.models import build_char_tokenizer, load_model
from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


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


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_replay_signals_through_fused_op_match_generate_logits(tok, backend):
    """The seam to ``ttrl_lightning.ops.token_stats``: the signals replayed through the fused op and those
    taken from generate's logits both equal one full forward + log_softmax (logprob, entropy and
    self-certainty = KL(U || p) = -(1/V) sum_j log p_j - log V) on every completion token."""
    model = load_model("tiny:qwen2", tok, seed=0)
    p = SamplingParams(n=2, max_new_tokens=7, seed=5)
    a = HFGenerateEngine(tok, record_signals=True).generate(model, ["12+7=", "3-1="], p)
    b = HFGenerateEngine(tok, record_signals=True, signal_source="replay", signal_backend=backend).generate(
        model, ["12+7=", "3-1="], p)
    assert torch.equal(a.completion_ids, b.completion_ids)
    m = a.completion_mask.bool()
    ref = full_forward_signals(model, a)
    for k in ("logprob", "entropy", "self_certainty"):
        for source, r in (("generate", a), ("replay", b)):
            torch.testing.assert_close(r.signals[k][m].double(), ref[k][m], atol=1e-4, rtol=1e-4,
                                       msg=f"{source} {k}")
    assert (ref["self_certainty"][m] > 0).all()  # KL(U || p) > 0 for a non-uniform p

@pytest.mark.parametrize("source", ["generate", "replay"])
def test_signals_are_nan_exactly_outside_the_completion_mask(source):
    tok = build_char_tokenizer()
    model = load_model("tiny:qwen2", tok, seed=0)
    model.train()
    ro = HFGenerateEngine(tok, record_signals=True, signal_source=source).generate(
        model, ["12+7=", "3-1="], SamplingParams(n=3, max_new_tokens=8, seed=0))
    assert model.training  # the engine gives the module its mode back
    mask = ro.completion_mask.bool()
    assert not mask.all() and torch.equal(ro.completion_mask.long(), completion_mask_at_eos(ro.completion_ids,
                                                                                            tok.eos_token_id))
    assert sorted(ro.signals) == ["entropy", "logprob", "self_certainty"]
    for name, v in ro.signals.items():
        assert v.dtype == torch.float32 and v.shape == mask.shape
        assert torch.isfinite(v[mask]).all() and torch.isnan(v[~mask]).all(), name

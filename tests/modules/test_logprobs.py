"""modules/logprobs.py: which models take the fused log-prob path and why not, the fallback notice (once,
with the materialised result), ``logprob_impl='fused'`` refusing with the reason, LoRA on the body staying
fused, and the memory claim: GRPO's log-prob pass (forward + backward) never holds [R, C, V] logits."""
from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from tests.modules._models import random_rollouts, tiny_gemma2
from tests.ops._peak_memory import peak_extra_bytes
from ttrl_lightning.errors import UserError
from ttrl_lightning.models import load_model, load_tokenizer
from ttrl_lightning.modules import GRPOModule, PolicySpec
from ttrl_lightning.modules.logprobs import LogprobPath, fused_logprobs, fused_unsupported_reason
from ttrl_lightning.modules.specs import GRPOSpec, SamplingSpec

TINY = PolicySpec(model="tiny:qwen2")


def test_fused_path_fits_plain_heads_and_names_what_rules_a_model_out():
    tok = load_tokenizer("tiny:qwen2")
    assert fused_unsupported_reason(load_model("tiny:qwen2", tok)) is None
    assert "final_logit_softcapping=0.5" in fused_unsupported_reason(tiny_gemma2(len(tok)))
    model = load_model("tiny:llama", tok)
    model.config.logit_scale = 0.25
    assert "logit_scale=0.25" in fused_unsupported_reason(model)
    model = load_model("tiny:llama", tok)
    handle = model.get_output_embeddings().register_forward_hook(lambda *a: None)
    assert "forward hooks" in fused_unsupported_reason(model)
    handle.remove()
    model.set_output_embeddings(nn.Sequential(model.get_output_embeddings()))
    assert "is a Sequential, not a plain torch.nn.Linear" in fused_unsupported_reason(model)
    lora_head = load_model("tiny:llama", tok, lora={"r": 2, "target_modules": ["lm_head"]})
    assert "adapters" in fused_unsupported_reason(lora_head)
    lora_body = load_model("tiny:llama", tok, lora={"r": 2, "target_modules": ["q_proj", "v_proj"]})
    assert fused_unsupported_reason(lora_body) is None


def test_soft_capped_model_falls_back_with_one_notice_and_the_materialised_result(caplog):
    """Gemma 2 with final_logit_softcapping: 'auto' logs one notice naming the reason (not one per call) and
    returns exactly the materialised path's log-probs, which differ from an uncapped fused computation;
    'fused' raises naming the reason."""
    auto = GRPOModule(policy=TINY, sampling=SamplingSpec(temperature=0.8))
    model = tiny_gemma2(len(auto.tokenizer))
    r = random_rollouts(len(auto.tokenizer))
    with caplog.at_level(logging.WARNING, logger="ttrl_lightning.modules"):
        first = auto.sequence_logprobs(model, r)
        second = auto.sequence_logprobs(model, r)
    notices = [rec for rec in caplog.records if "materialised" in rec.getMessage()]
    assert len(notices) == 1 and "final_logit_softcapping" in notices[0].getMessage()
    want = GRPOModule(policy=TINY, sampling=SamplingSpec(temperature=0.8),
                      grpo=GRPOSpec(logprob_impl="materialized")).sequence_logprobs(model, r)
    assert torch.equal(first, want) and torch.equal(second, want)
    with torch.no_grad():
        uncapped = fused_logprobs(model, r.completion_ids, 0.8, input_ids=r.input_ids(),
                                  attention_mask=r.attention_mask())
    assert float((uncapped - want.detach()).abs().max()) > 1e-2  # falling back does matter here
    with pytest.raises(UserError, match="logprob_impl='fused' cannot be used with Gemma2ForCausalLM: .*"
                                        "final_logit_softcapping"):
        GRPOModule(policy=TINY, grpo=GRPOSpec(logprob_impl="fused")).sequence_logprobs(model, r)
    with pytest.raises(UserError, match="grpo.logprob_impl must be one of auto, fused, materialized, "
                                        "got 'chunked'"):
        GRPOModule(policy=TINY, grpo=GRPOSpec(logprob_impl="chunked"))


def test_lora_on_the_body_stays_fused_with_the_same_values_and_lora_gradients():
    m = GRPOModule(policy=PolicySpec(model="tiny:llama", lora={"r": 4, "lora_alpha": 8,
                                                                "target_modules": ["q_proj", "v_proj"]}))
    m.configure_model()
    r = random_rollouts(len(m.tokenizer), seed=1)
    lora = {k: p for k, p in m.policy.named_parameters() if p.requires_grad}
    assert lora and all("lora_" in k for k in lora)
    with torch.no_grad():  # non-zero B, so the adapters change the log-probs
        for k, p in lora.items():
            p.normal_(0, 0.2)
    grads = {}
    for impl in ("materialized", "auto"):
        m.logprob_path = LogprobPath(impl, "GRPOModule")
        lp = m.sequence_logprobs(m.policy, r)
        grads[impl] = (lp, torch.autograd.grad((lp * r.completion_mask).sum(), list(lora.values())))
    torch.testing.assert_close(grads["auto"][0], grads["materialized"][0], rtol=1e-5, atol=1e-5)
    for k, ga, gm in zip(lora, grads["auto"][1], grads["materialized"][1]):
        assert float(gm.abs().max()) > 0
        torch.testing.assert_close(ga, gm, rtol=1e-4, atol=1e-6, msg=k)


@pytest.mark.subprocess
def test_grpo_logprob_pass_never_holds_full_logits():
    """R = 16 rollouts of C = 128 tokens, V = 32,768 (a tied head, H = 16): the [R, C, V] float32 logits
    would take 256 MiB. Forward + backward of sequence_logprobs on the fused path stays below a quarter of
    that (one logits tile, the [V, H] gradient, activations); the materialised path's is caught above 90%.
    Each pass is measured in a fresh process (tests/ops/_peak_memory.py)."""
    full = 16 * 128 * 32768 * 4
    extra = peak_extra_bytes("grpo_logprobs", "fused")
    print(f"\nfused log-prob pass: peak extra {extra / 2**20:.1f} MiB, [R, C, V] logits {full / 2**20:.0f} MiB")
    assert extra < full / 4, f"peak extra {extra / 2**20:.1f} MiB vs [R, C, V] logits {full / 2**20:.0f} MiB"
    materialized = peak_extra_bytes("grpo_logprobs", "materialized")
    assert materialized > 0.9 * full, f"materialised pass: peak extra {materialized / 2**20:.1f} MiB"

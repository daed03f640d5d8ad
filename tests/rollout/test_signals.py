"""replay_token_signals (the one teacher-forced replay, on a Rollouts batch) against per-row full logits."""
from __future__ import annotations

import math

import pytest
import torch

from ttrl_lightning.models import build_char_tokenizer, load_model
from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams
from ttrl_lightning.rollout.signal_recording import mask_signals, replay_token_signals


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_mask_signals_pads_with_nan():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = mask_signals({"logprob": torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]], dtype=torch.float64)}, mask)
    assert out["logprob"].dtype == torch.float32
    assert out["logprob"][mask.bool()].tolist() == [1.0, 2.0, 3.0] and torch.isnan(out["logprob"][~mask.bool()]).all()


def test_replay_equals_full_logits_of_each_unpadded_row(tok):
    """Prompts of different lengths (left padding) and completions that end early (right padding): every
    completion token's signals equal those of a plain forward of that row alone, without any padding."""
    model = load_model("tiny:qwen2", tok, seed=1)
    ro = HFGenerateEngine(tok).generate(model, ["12+7=", "100-99="], SamplingParams(n=2, max_new_tokens=9, seed=3))
    assert ro.prompt_mask.sum(1).unique().numel() == 2  # left padding present
    sig = replay_token_signals(model, ro)
    V = model.get_output_embeddings().weight.shape[0]
    for r in range(ro.completion_ids.shape[0]):
        p = ro.prompt_ids[r][ro.prompt_mask[r].bool()]
        c = ro.completion_ids[r][ro.completion_mask[r].bool()]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.cat([p, c])[None]).logits[0, len(p) - 1:-1].float(), -1)
        n = len(c)
        torch.testing.assert_close(sig["logprob"][r, :n], logp.gather(-1, c[:, None])[:, 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sig["entropy"][r, :n], -(logp.exp() * logp).sum(-1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sig["self_certainty"][r, :n], -logp.mean(-1) - math.log(V), atol=1e-5, rtol=1e-5)
        for v in sig.values():
            assert torch.isnan(v[r, n:]).all()

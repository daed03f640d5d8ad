"""HFGenerateEngine's per-token signals follow the package's padding convention (NaN outside the mask)."""
from __future__ import annotations

import pytest
import torch

from ttrl_lightning.masking import completion_mask_at_eos
from ttrl_lightning.models import build_char_tokenizer, load_model
from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams


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

"""Signals recorded during generate equal a teacher-forced replay of the same sequences."""
from __future__ import annotations

import pytest
import torch

from tests.integrations._tiny_models import llama, qwen2_vl, text_batch, vl_batch
from ttrl_lightning.integrations import generate_with_signals, score_rollouts

N_NEW = 5


def _replay_batch(prompt, sequences, signals):
    B, T0 = prompt["input_ids"].shape
    n = sequences.shape[1] - T0
    batch = dict(prompt)
    batch["input_ids"] = sequences
    batch["attention_mask"] = torch.cat([prompt["attention_mask"], torch.ones(B, n, dtype=torch.long)], 1)
    batch["completion_mask"] = torch.cat([torch.zeros(B, T0, dtype=torch.long), signals.completion_mask.long()], 1)
    if "mm_token_type_ids" in prompt:
        batch["mm_token_type_ids"] = torch.cat([prompt["mm_token_type_ids"], torch.zeros(B, n, dtype=torch.long)], 1)
    return batch


@pytest.mark.parametrize("factory,make_batch", [(qwen2_vl, vl_batch), (llama, text_batch)], ids=["qwen2_vl", "llama"])
def test_generation_signals_equal_replay(factory, make_batch):
    model = factory()
    full = make_batch()
    T0 = 10 if factory is qwen2_vl else 6
    prompt = {k: (v[:, :T0] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v)
              for k, v in full.items() if k != "completion_mask"}
    torch.manual_seed(0)
    sequences, sig = generate_with_signals(model, max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=True,
                                           top_k=0, pad_token_id=0, **prompt)
    assert sequences.shape[1] == T0 + N_NEW
    assert model.config._attn_implementation == "sdpa"  # restored after generation
    replay = score_rollouts(model, _replay_batch(prompt, sequences, sig))
    mask = sig.completion_mask
    assert mask.sum() > 0
    for name in ("logprob", "entropy", "self_certainty", "visual_engagement", "image_attention"):
        got, want = getattr(sig, name), getattr(replay, name)
        if factory is llama and name in ("visual_engagement", "image_attention"):
            assert got is None and want is None
            continue
        torch.testing.assert_close(got[mask], want[:, T0:][mask], atol=3e-5, rtol=1e-4, msg=name)
    torch.testing.assert_close(sig.group_mass[mask], replay.group_mass[:, T0:][mask], atol=3e-5, rtol=1e-4)


def test_generation_with_several_return_sequences():
    """num_return_sequences repeats each prompt; the recorder follows the expanded batch."""
    model = llama()
    full = text_batch()
    prompt = {k: v[:, :6] for k, v in full.items() if k != "completion_mask"}
    torch.manual_seed(1)
    sequences, sig = generate_with_signals(model, max_new_tokens=4, min_new_tokens=4, do_sample=True, top_k=0,
                                           num_return_sequences=2, pad_token_id=0, **prompt)
    assert sequences.shape == (4, 10)
    expanded = {k: v.repeat_interleave(2, 0) for k, v in prompt.items()}
    replay = score_rollouts(model, _replay_batch(expanded, sequences, sig))
    mask = sig.completion_mask
    torch.testing.assert_close(sig.logprob[mask], replay.logprob[:, 6:][mask], atol=3e-5, rtol=1e-4)
    torch.testing.assert_close(sig.group_mass[mask], replay.group_mass[:, 6:][mask], atol=3e-5, rtol=1e-4)


def test_every_eos_id_of_a_list_ends_the_completion_mask():
    """generation_config.eos_token_id may be a list: the first of them in a row ends its completion."""
    model = llama()
    prompt = {k: v[:, :6] for k, v in text_batch().items() if k != "completion_mask"}
    free, _ = generate_with_signals(model, max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None,
                                    record_attention=False, **prompt)
    stop = int(free[0, 6 + 1])  # the second greedy token of row 0 becomes an EOS id
    unused = next(t for t in range(3, 90) if t not in free[:, 6:].tolist()[0] + free[:, 6:].tolist()[1])
    model.generation_config.eos_token_id = [unused, stop]
    sequences, sig = generate_with_signals(model, max_new_tokens=5, do_sample=False, pad_token_id=0,
                                           record_attention=False, **prompt)
    n, first_stop = sequences.shape[1] - 6, int((sequences[0, 6:] == stop).nonzero()[0, 0])
    assert sig.completion_mask[0].tolist() == [True] * (first_stop + 1) + [False] * (n - first_stop - 1)
    assert not sig.completion_mask[0].all() and torch.isnan(sig.logprob[0][~sig.completion_mask[0]]).all()
    assert torch.isfinite(sig.logprob[sig.completion_mask]).all()

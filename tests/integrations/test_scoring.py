"""score_rollouts (fused ops + ttrl_mass attention) against eager attention maps and full logits."""
from __future__ import annotations

import math

import pytest
import torch

from tests.integrations._tiny_models import llama, qwen2_vl, qwen3, text_batch, vl_batch
from ttrl_lightning.integrations import GROUP_NAMES, IMAGE, score_rollouts
from ttrl_lightning.integrations.groups import image_token_ids, key_groups_from_ids, special_token_ids

MODEL_KEYS = ("pixel_values", "image_grid_thw", "mm_token_type_ids")


def _eager_reference(model, batch, tokenizer=None):
    """Signals from full logits and eager attention maps (output_attentions=True), the plain way
    (``tokenizer``: its special ids join the config's in the SPECIAL key group, as the recorders take it)."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        extra = {k: batch[k] for k in MODEL_KEYS if k in batch}
        with torch.no_grad():
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_attentions=True,
                        use_cache=False, **extra)
    finally:
        model.set_attn_implementation(previous)
    logp = torch.log_softmax(out.logits.float(), -1)  # [B, T, V]
    V = logp.shape[-1]
    ids = batch["input_ids"]
    lp = torch.full(ids.shape, float("nan"))
    ent = torch.full(ids.shape, float("nan"))
    sc = torch.full(ids.shape, float("nan"))
    lp[:, 1:] = logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    ent[:, 1:] = -(logp[:, :-1].exp() * logp[:, :-1]).sum(-1)
    sc[:, 1:] = -logp[:, :-1].mean(-1) - math.log(V)
    attn = torch.stack([a.float() for a in out.attentions]).mean(dim=(0, 2))  # mean over layers, heads: [B, T, T]
    groups = key_groups_from_ids(ids, batch["attention_mask"], batch["completion_mask"],
                                 image_token_ids(model.config), special_token_ids(model.config, tokenizer),
                                 batch.get("mm_token_type_ids"))
    onehot = torch.nn.functional.one_hot(groups.clamp_min(0), len(GROUP_NAMES)).float() * (groups >= 0)[..., None]
    mass = torch.full((*ids.shape, len(GROUP_NAMES)), float("nan"))
    mass[:, 1:] = torch.einsum("bqk,bkg->bqg", attn, onehot)[:, :-1]
    return lp, ent, sc, mass, len(out.attentions)


def _assert_close_on_completion(got, want, mask, atol=2e-5):
    torch.testing.assert_close(got[mask], want[mask], atol=atol, rtol=1e-4)
    assert torch.isnan(got[~mask]).all()


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl"])
def test_vl_signals_match_eager_attention_and_full_logits(kind):
    model = qwen2_vl(kind=kind)
    batch = vl_batch()
    sig = score_rollouts(model, batch)
    lp, ent, sc, mass, n_layers = _eager_reference(model, batch)
    assert n_layers == model.config.text_config.num_hidden_layers  # decoder layers only
    mask = batch["completion_mask"].bool()
    _assert_close_on_completion(sig.logprob, lp, mask)
    _assert_close_on_completion(sig.entropy, ent, mask)
    _assert_close_on_completion(sig.self_certainty, sc, mask)
    torch.testing.assert_close(sig.group_mass[mask], mass[mask], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(sig.group_mass[mask].sum(-1), torch.ones(int(mask.sum())), atol=1e-5, rtol=0)
    want_v = mass[..., 0] / (mass[..., 0] + mass[..., 1] + mass[..., 2])
    _assert_close_on_completion(sig.visual_engagement, want_v, mask)
    _assert_close_on_completion(sig.image_attention, mass[..., IMAGE], mask)
    assert (sig.image_attention[mask] > 0).all()
    # the attention implementation is restored after scoring
    assert model.config._attn_implementation == "sdpa"
    rows = sig.per_rollout()
    assert [len(r["logprob"]) for r in rows] == mask.sum(1).tolist()


@pytest.mark.parametrize("factory", [llama, qwen3], ids=["llama", "qwen3"])
def test_text_only_model_reports_no_visual_engagement(factory):
    model = factory()
    batch = text_batch()
    sig = score_rollouts(model, batch)
    lp, ent, sc, mass, _ = _eager_reference(model, batch)
    mask = batch["completion_mask"].bool()
    _assert_close_on_completion(sig.logprob, lp, mask)
    _assert_close_on_completion(sig.entropy, ent, mask)
    _assert_close_on_completion(sig.self_certainty, sc, mask)
    torch.testing.assert_close(sig.group_mass[mask], mass[mask], atol=2e-5, rtol=1e-4)
    assert sig.visual_engagement is None and sig.image_attention is None


def test_score_rollouts_rejects_bad_batches():
    model = llama()
    batch = text_batch()
    bad = dict(batch, completion_mask=torch.ones_like(batch["input_ids"]))
    with pytest.raises(ValueError, match="position 0"):
        score_rollouts(model, bad)
    with pytest.raises(ValueError, match=r"must be \[B, T\]"):
        score_rollouts(model, dict(batch, completion_mask=batch["completion_mask"][:, :-1]))
    renamed = {("response_mask" if k == "completion_mask" else k): v for k, v in batch.items()}
    with pytest.raises(ValueError, match="needs 'completion_mask'.*response_mask"):  # no silent second name
        score_rollouts(model, renamed)


def test_replay_gives_the_model_its_mode_back():
    model = llama().train()
    sig = score_rollouts(model, text_batch(), record_attention=False)
    assert model.training and sig.group_mass is None and sig.image_attention is None


@pytest.mark.parametrize("softcap", [0.5, 1.0])
def test_replay_refuses_logits_transformed_after_the_head(softcap):
    """Soft-capping (any cap, 1.0 included: c tanh(z / c) is not the identity) changes the distribution after
    the head, so signals from the hidden states and the head alone would be wrong: refused, naming the field."""
    from tests.modules._models import tiny_gemma2

    model = tiny_gemma2(vocab_size=40, softcap=softcap)
    ids = torch.randint(0, 40, (1, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros_like(ids)
    mask[:, 3:] = 1
    with pytest.raises(NotImplementedError, match=f"final_logit_softcapping={softcap}"):
        score_rollouts(model, {"input_ids": ids, "completion_mask": mask}, record_attention=False)

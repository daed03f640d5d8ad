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


def _count_prefill_tokens(model):
    """A counter of the tokens that go through ``model``'s input embedding (each forward's ``input_ids``)."""
    seen = []
    model.get_input_embeddings().register_forward_hook(lambda mod, args, out: seen.append(args[0].numel()))
    return seen


#: the model passes' dtype in the sampling tests: fp32, or bf16 autocast (what a bf16-mixed trainer samples under)
PASS_DTYPES = ("float32", "bfloat16")
#: how far the two sampling paths' raw-logit signals may lie apart, per dtype (nats): fp32 summation order only;
#: bf16 rounds every GEMM output to 8 mantissa bits, and the two paths run GEMMs of other shapes
PATH_SIGNAL_ATOL = {"float32": 1e-5, "bfloat16": 2e-2}


def _passes_in(dtype: str):
    """The context the model passes of a sampling test run in."""
    import contextlib

    return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext()


@pytest.mark.parametrize("dtype,seed", [("float32", 11), ("bfloat16", 13)])  # seeds where a row finishes early
def test_prompt_shared_sampling_draws_generates_tokens_until_a_row_finishes(tok, dtype, seed):
    """Prompt sharing (the default) against ``model.generate`` on repeated prompts, same seed: the same tokens
    and the same raw-logit signals (within ``PATH_SIGNAL_ATOL`` of the dtype) at every step up to the first step
    where a row finishes (the RNG is consumed identically until then); greedy rows are equal throughout. In fp32
    and under bf16 autocast."""
    model = load_model("tiny:qwen2", tok, seed=0)
    prompts = ["12+7=", "3-1=", "9+9=111"]
    p = SamplingParams(n=4, temperature=0.9, top_k=20, top_p=0.9, max_new_tokens=12, seed=seed)
    with _passes_in(dtype):
        plain = HFGenerateEngine(tok, record_signals=True, share_prompt=False).generate(model, prompts, p)
        shared = HFGenerateEngine(tok, record_signals=True).generate(model, prompts, p)
    first = int(min(plain.completion_mask.sum(1).min(), shared.completion_mask.sum(1).min()))
    assert 1 <= first < p.max_new_tokens  # some row finished early, so the comparison below is partial
    assert torch.equal(plain.completion_ids[:, :first], shared.completion_ids[:, :first])
    for k in ("logprob", "entropy", "self_certainty"):
        torch.testing.assert_close(shared.signals[k][:, :first], plain.signals[k][:, :first], rtol=0,
                                   atol=PATH_SIGNAL_ATOL[dtype])
        assert torch.equal(shared.signals[k].isnan(), ~shared.completion_mask.bool())
    assert not torch.equal(plain.completion_ids, shared.completion_ids)  # after it the batch is smaller
    greedy = SamplingParams(n=2, temperature=0.0, max_new_tokens=12)
    with _passes_in(dtype):
        g_plain = HFGenerateEngine(tok, share_prompt=False).generate(model, prompts, greedy)
        g_shared = HFGenerateEngine(tok).generate(model, prompts, greedy)
    assert torch.equal(g_plain.completion_ids, g_shared.completion_ids) and g_plain.texts == g_shared.texts


#: how far the sampler's log-prob of a token may lie from one full forward's, per dtype of the passes (nats)
SAMPLER_LOGPROB_ATOL = {"float32": 1e-4, "bfloat16": 2e-2}


@pytest.mark.parametrize("share_prompt", [True, False])
@pytest.mark.parametrize("dtype", PASS_DTYPES)
def test_sampler_logprobs_are_kept_under_a_lower_precision_autocast_only(tok, share_prompt, dtype):
    """Under bf16 autocast both text paths fill ``Rollouts.sampler_logprobs`` (the trainer compares them with its
    own pass: the gap and the TIS weight), equal to the recorded ``logprob`` signal and within
    ``SAMPLER_LOGPROB_ATOL`` of one full forward in the same dtype and in fp32; NaN outside the completion.
    In fp32 they stay None: the sampler's numbers are the trainer's."""
    model = load_model("tiny:qwen2", tok, seed=0)
    p = SamplingParams(n=3, max_new_tokens=8, seed=4)
    for record in (False, True):
        with _passes_in(dtype):
            ro = HFGenerateEngine(tok, record_signals=record, share_prompt=share_prompt).generate(
                model, ["12+7=", "3-1="], p)
        if dtype == "float32":
            assert ro.sampler_logprobs is None
            continue
        keep = ro.completion_mask.bool()
        assert torch.equal(ro.sampler_logprobs.isnan(), ~keep)
        if record:
            assert torch.equal(ro.sampler_logprobs[keep], ro.signals["logprob"][keep])
        for ref_dtype in PASS_DTYPES:
            with _passes_in(ref_dtype):
                ref = full_forward_signals(model, ro)["logprob"]
            torch.testing.assert_close(ro.sampler_logprobs[keep].double(), ref[keep], rtol=0,
                                       atol=SAMPLER_LOGPROB_ATOL[dtype], msg=f"against a {ref_dtype} forward")


def test_prompt_shared_prefill_is_once_per_prompt_and_finished_rows_leave(tok):
    """The prefill runs each prompt once, not n times; every later forward is one token per row still active."""
    model = load_model("tiny:llama", tok, seed=0)
    seen = _count_prefill_tokens(model)
    prompts, n = ["12+7=" * 6, "3-1=" * 5], 8
    p = SamplingParams(n=n, max_new_tokens=10, stop=("5", "7", "a", "e"), seed=2)
    eng = HFGenerateEngine(tok)
    ro = eng.generate(model, prompts, p)
    B, P = len(prompts), ro.prompt_ids.shape[1]
    R, row_steps = B * n, eng.last_timing["row_steps"]
    assert seen[0] == B * P and sum(seen) == B * P + row_steps - R
    assert row_steps == int(ro.completion_mask.sum()) < R * p.max_new_tokens  # no padding decoded
    seen.clear()
    HFGenerateEngine(tok, share_prompt=False).generate(model, prompts, p)
    assert seen[0] == R * P  # generate prefills every repeated row


def _length_and_last_token_tables(ro, tok):
    lengths = ro.completion_mask.sum(1)
    last = ro.completion_ids.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)
    return lengths.tolist(), [tok.decode([int(t)]) for t in last]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_prompt_shared_samples_have_generates_distribution(tok, dtype):
    """After rows finish the two paths draw differently, so compare distributions: the completion length and
    the final token over 600 samples each, a chi-square test of homogeneity, in fp32 and under bf16 autocast.
    The same test tells a sampler at another temperature (0.14 for 0.1) apart: it can fail."""
    from scipy.stats import chi2_contingency

    model = load_model("tiny:qwen2", tok, seed=0)

    def tables(engine, temperature, seed):
        p = SamplingParams(n=600, temperature=temperature, max_new_tokens=6, stop=tuple("aeiou123"), seed=seed)
        with _passes_in(dtype):
            return _length_and_last_token_tables(engine.generate(model, ["1+1="], p), tok)

    def p_value(x, y):
        keys = sorted(set(x) | set(y), key=str)
        counts = [[x.count(k) for k in keys], [y.count(k) for k in keys]]
        keep = [i for i in range(len(keys)) if counts[0][i] + counts[1][i] >= 10]  # chi-square needs counts
        other = [sum(c) - sum(c[i] for i in keep) for c in counts]
        table = [[c[i] for i in keep] + ([o] if sum(other) else []) for c, o in zip(counts, other)]
        return chi2_contingency(table).pvalue

    # the tiny random model's logits are nearly flat (std ~0.1): a low temperature gives them a shape
    plain = tables(HFGenerateEngine(tok, share_prompt=False), 0.1, 5)
    shared = tables(HFGenerateEngine(tok), 0.1, 6)
    hot = tables(HFGenerateEngine(tok), 0.14, 6)
    for i in range(2):  # lengths, final tokens
        assert p_value(plain[i], shared[i]) > 1e-3
    assert min(p_value(plain[i], hot[i]) for i in range(2)) < 1e-3


@pytest.mark.parametrize("share_prompt", [True, False])
def test_a_prompt_past_the_models_context_is_refused_before_sampling(tok, share_prompt):
    """tiny:llama has 256 positions: a prompt whose tokens plus max_new_tokens exceed them is one UserError
    naming it (TTRL and eval sample through here), before any token is sampled."""
    from ttrl_lightning.errors import UserError

    model = load_model("tiny:llama", tok, seed=0)
    eng = HFGenerateEngine(tok, share_prompt=share_prompt)
    with pytest.raises(UserError, match=r"prompt 1 \('7777.*: 250 prompt tokens \+ max_new_tokens 8 exceed the "
                                        r"model's context \(max_position_embeddings\) \(256 tokens\)"):
        eng.generate(model, ["1+1=", "7" * 250], SamplingParams(n=2, max_new_tokens=8))
    with pytest.raises(UserError, match="max_new_tokens 100000 exceed"):
        eng.generate(model, ["1+1="], SamplingParams(max_new_tokens=100000))
    assert eng.generate(model, ["7" * 248], SamplingParams(max_new_tokens=8)).completion_ids.shape[0] == 1


def test_a_prompt_that_cannot_fit_is_refused_by_its_characters_before_it_is_tokenized(tok, monkeypatch):
    """Tokenizing a 50 MB prompt took minutes and 19 GB before the context check refused it: a prompt with more
    characters than the context could hold at the tokenizer's longest vocabulary entry is refused first."""
    import time

    from ttrl_lightning.errors import UserError
    from ttrl_lightning.rollout.base import max_token_chars

    model = load_model("tiny:qwen2", tok, seed=0)
    per_token = max_token_chars(tok)
    assert per_token == max(len(t) for t in tok.get_vocab())
    huge = "7" * 5_000_000
    calls = []
    original = type(tok).__call__
    monkeypatch.setattr(type(tok), "__call__", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    t0 = time.perf_counter()
    with pytest.raises(UserError, match=r"prompt 0 .*5,000,000 characters, so at least [\d,]+ prompt tokens"):
        HFGenerateEngine(tok).generate(model, [huge], SamplingParams(max_new_tokens=4))
    assert not calls and time.perf_counter() - t0 < 5
    calls.clear()  # a prompt that fits is tokenized and sampled as before
    HFGenerateEngine(tok).generate(model, ["7" * 100], SamplingParams(max_new_tokens=4))
    assert calls


def test_a_model_folders_generation_config_is_ignored_on_every_path(tok):
    """With ``no_repeat_ngram_size: 1`` in the model's generation_config, ``generate`` at batch size 1 never
    repeated a token while the other paths did: one model sampled two ways. Now every path samples by
    SamplingParams alone: plain ``generate`` gives the prompt-shared path's tokens up to the first finished row,
    and repeats tokens as it does."""
    model = load_model("tiny:qwen2", tok, seed=0)
    model.generation_config.no_repeat_ngram_size = 1
    model.generation_config.repetition_penalty = 3.0
    prompts = ["12+7=", "3-1="]
    p = SamplingParams(n=4, temperature=1.0, top_k=0, max_new_tokens=24, seed=3)
    plain = HFGenerateEngine(tok, share_prompt=False).generate(model, prompts, p)
    shared = HFGenerateEngine(tok).generate(model, prompts, p)
    first = int(min(plain.completion_mask.sum(1).min(), shared.completion_mask.sum(1).min()))
    assert first >= 2 and torch.equal(plain.completion_ids[:, :first], shared.completion_ids[:, :first])
    repeats = [len(set(row[: int(m.sum())].tolist())) < int(m.sum())
               for row, m in zip(plain.completion_ids, plain.completion_mask)]
    assert any(repeats)  # no_repeat_ngram_size 1 would have forbidden every repeat

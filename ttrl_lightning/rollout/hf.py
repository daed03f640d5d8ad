"""Rollouts with Hugging Face ``generate``: batched, KV cache on, N samples per prompt."""
from __future__ import annotations

from typing import Sequence

import torch

from ttrl_lightning.rollout.base import (ROLLOUT_ENGINES, Rollouts, SamplingParams, check_context,
                                         check_context_chars, context_length, plain_generation_config,
                                         sampling_mode)
from ttrl_lightning.rollout.finishing import finish_rollouts
from ttrl_lightning.rollout.image_sampling import has_images, sample_each_prompt
from ttrl_lightning.rollout.requests import SamplingRequest, as_requests
from ttrl_lightning.rollout.shared_prefill import prompt_shared_sample, stop_criteria, supports_prompt_sharing
from ttrl_lightning.rollout.signal_recording import TOKEN_SIGNALS, mask_signals, replay_token_signals


def lowers_precision(device: torch.device) -> bool:
    """Whether the model runs under a ``torch.autocast`` to a lower precision on ``device`` right now."""
    kind = device.type
    return (kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind)
            and torch.get_autocast_dtype(kind) in (torch.bfloat16, torch.float16))


@ROLLOUT_ENGINES.register("hf")
class HFGenerateEngine:
    """Samples with ``model.generate`` (the policy itself, so no weight sync is needed).

    ``record_signals``: also return per-token signals of the sampled tokens under the raw
    (pre-temperature) logits: ``logprob``, ``entropy``, ``self_certainty`` ([R, C] float32, NaN outside
    the completion mask). ``signal_source="generate"``: from the logits that ``generate`` returns, via
    ``TOKEN_SIGNALS[signal_backend]`` (plain PyTorch). ``signal_source="replay"``: ``replay_token_signals``,
    the teacher-forced replay through the fused signal op ``ttrl_lightning.ops.token_stats`` (no [R, C, V]
    logits kept; ``signal_backend`` is then the ops backend, ``"auto"`` for its own choice).

    ``share_prompt`` (default on): prompt-shared sampling (``rollout.shared_prefill``): each prompt is
    prefilled once and its KV cache repeated ``n`` ways, and finished rows leave the batch; the same
    warpers and draws as ``generate`` (the same tokens for a fixed seed until the first row finishes, the
    same distribution after it). Off, or for a model it does not support (a model without a row-wise cache),
    the prompts are repeated and passed to ``model.generate``. Every path samples by ``SamplingParams``
    alone: the model's own ``generation_config`` (a repetition penalty, say) is ignored
    (``base.plain_generation_config``). ``last_timing`` holds the shared path's prefill / decode seconds of the last call.

    Image requests (``rollout.requests.SamplingRequest`` with ``images``; ``processor``: the vision-language model's,
    ``models.load_processor``): a call with any of them samples every prompt through
    ``image_sampling.sample_each_prompt``, one ``generate`` call per prompt with the processor's pixel
    inputs, the signals recorded while sampling (``record_signals``: the text signals and VisConf's
    ``visual_engagement`` / ``image_attention`` from the streaming attention-mass function), each row's
    images on ``Rollouts.images`` for the training pass. Without ``record_signals`` and with ``share_prompt``,
    each image prompt is prefilled once with its pixels and its cache repeated n ways (``shared_prefill``,
    M-RoPE positions continued from the prompt's ``rope_deltas``): one vision-tower pass per question, not n.
    An image prompt without a processor is one ``UserError``.

    Sampler log-probs: a call made under a lower-precision ``torch.autocast`` (a ``bf16-mixed`` trainer,
    ``cli.precision``) on the prompt-shared or the repeated-``generate`` path fills ``Rollouts.sampler_logprobs``
    with each sampled token's log-prob under the raw logits the sampler drew it from. The trainer's own pass,
    run as a full forward, differs from the cached decode by the low precision's rounding: GRPO logs that gap
    and corrects for it with the truncated importance weight, as for an engine with its own weights. In fp32
    (and on the per-prompt and image paths) it stays None: the sampler's numbers are the trainer's.

    ``per_prompt_generate``: every prompt, text or image, through ``image_sampling.sample_each_prompt``: one
    ``generate`` call per prompt (``num_return_sequences``), no prompt sharing, the signals recorded by the
    step recorder. Called with one prompt and its own seed, a prompt's rollouts depend on the model, the
    settings and that seed alone: ``ttrl generate --batch-size 1`` samples each (question, view) so.
    """

    def __init__(self, tokenizer, record_signals: bool = False, signal_backend: str = "torch",
                 signal_source: str = "generate", share_prompt: bool = True, processor=None,
                 per_prompt_generate: bool = False):
        if signal_source not in ("generate", "replay"):
            raise ValueError(f"signal_source must be 'generate' or 'replay', got {signal_source!r}")
        self.tokenizer = tokenizer
        self.record_signals = record_signals
        self.signal_backend = signal_backend
        self.signal_source = signal_source
        self.share_prompt = bool(share_prompt)
        self.processor = processor
        self.per_prompt_generate = bool(per_prompt_generate)
        self.last_timing: dict = {}

    #: samples with the trained module itself: nothing to sync, its log-probs are the trainer's
    owns_weights = False
    max_model_len = None  # the model's own context
    takes_text_prompts = True
    cli_options: tuple[str, ...] = ()
    takes_images = True
    #: questions per call when a command is not told (``ttrl generate`` samples one question at a time)
    default_batch_size = 1

    @classmethod
    def check_available(cls) -> None:  # transformers is a dependency
        return None

    def sync_weights(self, model) -> None:  # the HF engine samples from the trained module directly
        return None

    @torch.no_grad()
    def generate(self, model, requests: Sequence[SamplingRequest | str], params: SamplingParams) -> Rollouts:
        if not requests:
            raise ValueError("no prompts")
        tok = self.tokenizer
        requests = as_requests(requests)
        if self.per_prompt_generate or has_images(requests):
            with sampling_mode(model, params.seed):
                return sample_each_prompt(model, tok, self.processor, requests, params, self.record_signals,
                                          share_prompt=self.share_prompt and not self.per_prompt_generate)
        prompts = [r.text for r in requests]
        if tok.padding_side != "left":
            tok.padding_side = "left"
        check_context_chars(list(prompts), params.max_new_tokens, context_length(model), tok,
                            "the model's context (max_position_embeddings)")
        enc = tok(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        check_context(enc["attention_mask"].sum(1).tolist(), params.max_new_tokens, context_length(model),
                      "the model's context (max_position_embeddings)", prompts=list(prompts))
        device = next(model.parameters()).device
        if self.share_prompt and supports_prompt_sharing(model):
            return self._generate_shared(model, enc["input_ids"].to(device), enc["attention_mask"].to(device),
                                         params)
        # each prompt repeated n times (prompt-major rows); also covers greedy decoding with n > 1
        input_ids = enc["input_ids"].to(device).repeat_interleave(params.n, dim=0)
        attn = enc["attention_mask"].to(device).repeat_interleave(params.n, dim=0)
        greedy = params.temperature == 0
        keep_logprobs = lowers_precision(device)
        kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            do_sample=not greedy,
            use_cache=True,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            return_dict_in_generate=True,
            output_logits=(self.record_signals and self.signal_source == "generate") or keep_logprobs,
        )
        if not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tok)
        with sampling_mode(model, params.seed), plain_generation_config(model):
            out = model.generate(input_ids=input_ids, attention_mask=attn, **kwargs)
        P = input_ids.shape[1]
        comp = out.sequences[:, P:]
        if comp.shape[1] == 0:
            raise RuntimeError("generate returned no new tokens")
        rollouts = finish_rollouts(tok, input_ids, attn, comp, params)
        recorded = self.record_signals and self.signal_source == "generate"
        if recorded or keep_logprobs:  # one pass over generate's [R, C, V] logits gives both
            backend = TOKEN_SIGNALS[self.signal_backend if recorded else "torch"]
            signals = mask_signals(backend(torch.stack(out.logits, dim=1), rollouts.completion_ids),
                                   rollouts.completion_mask)
            if recorded:
                rollouts.signals = signals
            if keep_logprobs:
                rollouts.sampler_logprobs = signals["logprob"]
        if self.record_signals and not recorded:
            rollouts.signals = self._replay(model, rollouts)
        return rollouts

    def _replay(self, model, rollouts: Rollouts) -> dict:
        backend = None if self.signal_backend == "auto" else self.signal_backend
        return replay_token_signals(model, rollouts, 1.0, backend)

    def _generate_shared(self, model, input_ids: torch.Tensor, attn: torch.Tensor, params: SamplingParams
                         ) -> Rollouts:
        tok = self.tokenizer
        stop = stop_criteria(tok, params.stop)
        on_step, per_step = None, []
        recorded = self.record_signals and self.signal_source == "generate"
        keep_logprobs = lowers_precision(input_ids.device)
        if recorded or keep_logprobs:
            backend = TOKEN_SIGNALS[self.signal_backend if recorded else "torch"]
            on_step = lambda rows, tokens, logits, t: per_step.append((rows, t, backend(logits, tokens)))  # noqa: E731
        with sampling_mode(model, params.seed):
            comp, lengths, self.last_timing = prompt_shared_sample(
                model, input_ids, attn, params, tok.eos_token_id, tok.pad_token_id, stop=stop, on_step=on_step)
        n = params.n
        rollouts = finish_rollouts(tok, input_ids.repeat_interleave(n, 0), attn.repeat_interleave(n, 0), comp,
                                   params, lengths=lengths)
        if per_step:
            signals = {k: torch.zeros(comp.shape, dtype=torch.float32, device=comp.device) for k in per_step[0][2]}
            for rows, t, values in per_step:
                for k, v in values.items():
                    signals[k][rows, t] = v.float()
            signals = mask_signals(signals, rollouts.completion_mask)
            if recorded:
                rollouts.signals = signals
            if keep_logprobs:
                rollouts.sampler_logprobs = signals["logprob"]
        if self.record_signals and not recorded:
            rollouts.signals = self._replay(model, rollouts)
        return rollouts

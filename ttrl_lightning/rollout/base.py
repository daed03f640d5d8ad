"""The rollout-engine interface: prompts in, N sampled completions per prompt out (token ids + masks).

The whole contract is the :class:`RolloutEngine` Protocol: ``generate(model, prompts, params) -> Rollouts``,
``sync_weights(model)`` (called after every optimizer step), ``owns_weights`` (True when the engine samples
from its own copy of the weights, vLLM: it then fills ``Rollouts.sampler_logprobs``, which the trainer
compares with its own; the HF engine fills them too when it samples under a lower-precision autocast),
``max_model_len`` (the context it samples within; None: the model's) and
``record_signals`` (whether ``generate`` records the per-token signals). The HF engine (``hf.py``) samples
with the policy being trained; the shared finishing rules are ``finishing.py``. Rows of a ``Rollouts`` are
prompt-major: row ``i * n + j`` is sample ``j`` of prompt ``i``.

Engines are registered by name in ``ROLLOUT_ENGINES`` (``"hf"``, ``"vllm"``) and built as
``ROLLOUT_ENGINES[name](tokenizer, **options)``; ``build_engine`` turns a config's ``engine:`` value (a name,
``{name: ..., <options>}`` or an engine object) into an engine. An engine samples
``requests.SamplingRequest`` s (a plain ``str`` is a request without images); one that ``takes_images`` samples
their images (``SamplingRequest.images``, paths) with the model's processor.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence, runtime_checkable

import torch

from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.masking import position_ids_from_mask
from ttrl_lightning.models import VisionBlock, vision_inputs
from ttrl_lightning.registry import Registry

#: rollout engines by name: ``ROLLOUT_ENGINES[name](tokenizer, **options)`` (``hf.py``, ``vllm_engine.py``)
ROLLOUT_ENGINES: Registry = Registry("rollout engine")


#: the decoding fields both a training config (``modules.specs.SamplingSpec``) and an engine call
#: (``SamplingParams``) take, and their bounds
SAMPLING_RULES: dict[str, Bounds] = {
    "temperature": Bounds(low=0),
    "top_p": Bounds(low=0, high=1, low_open=True),
    "top_k": Bounds(low=0, integer=True),
    "max_new_tokens": Bounds(low=1, integer=True),
}
#: samples per prompt
SAMPLES_RULE = Bounds(low=1, integer=True)


def check_sampling(values, where: str) -> tuple[str, ...]:
    """Check the decoding fields of ``values`` (``SAMPLING_RULES`` and ``stop``: a list of non-empty strings),
    raising a ``UserError`` named ``<where><field>``; returns ``stop`` as a tuple. The one check of
    ``SamplingParams`` and ``modules.specs.SamplingSpec``."""
    check_bounds(values, SAMPLING_RULES, where)
    stop = values["stop"]
    if isinstance(stop, str) or not all(isinstance(x, str) and x for x in stop):
        raise UserError(f"{where}stop must be a list of non-empty strings, got {stop!r}")
    return tuple(stop)


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. ``temperature == 0`` is greedy; ``top_k == 0`` and ``top_p == 1`` disable those
    filters; generation of a row stops at EOS, at any of ``stop`` (kept in the completion) or after
    ``max_new_tokens``. ``seed`` makes sampling reproducible (None: the global RNG as it is)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 32
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self):
        check_sampling(self.__dict__, "")
        if self.n not in SAMPLES_RULE:
            raise UserError(f"n must be {SAMPLES_RULE}, got {self.n!r}")


@dataclass
class Rollouts:
    """Sampled completions, R = (number of prompts) * n rows.

    prompt_ids: [R, P] left-padded; prompt_mask: [R, P];
    completion_ids: [R, C] right-padded; completion_mask: [R, C] (1 up to and including EOS / stop);
    texts: R completion strings (cut at EOS / stop); group: [R] index of the prompt of each row;
    signals: optional per-token tensors [R, C] float32, NaN outside ``completion_mask``, named as the
    pool schema's per-token fields (``data.pool.TOKEN_FIELDS``: ``logprob``, ``entropy``, ``self_certainty``
    of the sampling model ...). ``records_from_rollouts`` turns a ``Rollouts`` into pool records.
    sampler_logprobs: [R, C] float32 log-probs of the sampled tokens under the sampler's raw logits, NaN
    outside ``completion_mask``, from an engine with its own weights (``owns_weights``: vLLM) or one that sampled
    under a lower-precision autocast (hf under a bf16-mixed trainer), for the trainer's importance correction;
    None from an engine whose sampler's numbers are the trainer's (the policy itself, in the trainer's dtype).
    images: per row, the images its prompt shows (``models.VisionBlock`` s in the order of their tokens: the
    processor's ``pixel_values`` / ``image_grid_thw``), so that every teacher-forced pass over the rows (the
    policy, the old policy, the reference or EMA anchor, a replay) sees the pixels the sampler saw
    (``forward_inputs``); empty for text rollouts.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]
    group: torch.Tensor
    n: int
    signals: dict[str, torch.Tensor] = field(default_factory=dict)
    sampler_logprobs: torch.Tensor | None = None
    images: list[list[VisionBlock]] = field(default_factory=list)

    @property
    def num_completion_tokens(self) -> int:
        return int(self.completion_mask.sum())

    def input_ids(self) -> torch.Tensor:
        """[R, P + C] prompt followed by completion."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def forward_inputs(self) -> dict[str, torch.Tensor]:
        """The model inputs of a teacher-forced pass over prompt + completion: ``input_ids``,
        ``attention_mask`` and ``position_ids`` from the mask (left padding does not shift positions). The
        one place the training and replay passes take their inputs from. With images (``images``), the pixel
        inputs instead of position ids: ``pixel_values`` and ``image_grid_thw`` of every row's images in row
        order and ``mm_token_type_ids`` (1 at image tokens), from which the model computes its multimodal
        (M-RoPE) positions over the unpadded tokens (``models.vision_inputs``)."""
        attn = self.attention_mask()
        ids = self.input_ids()
        blocks = [b for row in self.images for b in row]
        if blocks:
            return {"input_ids": ids, "attention_mask": attn, **vision_inputs(blocks, ids)}
        return {"input_ids": ids, "attention_mask": attn, "position_ids": position_ids_from_mask(attn)}

    def first_rows(self, k: int) -> torch.Tensor:
        """Indices of the first ``k`` rows of every group (``1 <= k <= n``), prompt-major."""
        if not 1 <= k <= self.n:
            raise ValueError(f"k must be in [1, n={self.n}], got {k}")
        R = self.completion_ids.shape[0]
        return torch.arange(R, device=self.completion_ids.device).view(R // self.n, self.n)[:, :k].reshape(-1)

    def first_per_group(self, k: int) -> Rollouts:
        """The first ``k`` rows of every group (``1 <= k <= n``), as a ``Rollouts`` with ``n = k``: the
        samples are i.i.d., so the first k are a uniform draw of k of them (TTRL trains on N of M votes).
        Completion columns are cut to the longest kept row."""
        rows = self.first_rows(k)
        keep = self.completion_mask[rows]
        width = max(int(keep.sum(1).max()), 1)
        return Rollouts(
            prompt_ids=self.prompt_ids[rows],
            prompt_mask=self.prompt_mask[rows],
            completion_ids=self.completion_ids[rows, :width],
            completion_mask=keep[:, :width],
            texts=[self.texts[i] for i in rows.tolist()],
            group=self.group[rows],
            n=k,
            signals={name: v[rows, :width] for name, v in self.signals.items()},
            sampler_logprobs=None if self.sampler_logprobs is None else self.sampler_logprobs[rows, :width],
            images=[self.images[i] for i in rows.tolist()] if self.images else [],
        )


@runtime_checkable
class RolloutEngine(Protocol):
    """What every rollout engine is (module docstring); a new engine is one file and its registration."""

    #: samples from its own copy of the weights (``sync_weights`` pushes them; ``Rollouts.sampler_logprobs``)
    owns_weights: bool
    #: the context it samples within (None: the model's ``max_position_embeddings``)
    max_model_len: int | None
    #: ``generate`` records the per-token signals (``Rollouts.signals``)
    record_signals: bool
    #: it samples plain (text) prompts, so ``ttrl eval`` and ``ttrl generate`` offer it (the agent engine
    #: samples ``AgentPrompt`` s: not a command's engine)
    takes_text_prompts: bool
    #: the options a sampling command may set (``--max-model-len`` -> ``max_model_len``)
    cli_options: tuple[str, ...]
    #: it samples requests with images (``requests.SamplingRequest.images``); an engine without it is refused
    #: by ``requests.PromptRenderer.check`` with one line
    takes_images: bool
    #: questions per ``generate`` call a sampling command uses when not told (``ttrl generate --batch-size``)
    default_batch_size: int

    @classmethod
    def check_available(cls) -> None:
        """Raise a one-line ``ImportError`` naming the extras when the engine cannot run here."""
        ...

    def generate(self, model, requests: Sequence, params: SamplingParams) -> Rollouts:
        """``params.n`` samples of every request (``requests.SamplingRequest`` or ``str``), prompt-major."""
        ...

    def sync_weights(self, model) -> None: ...


def build_engine(spec, tokenizer, **defaults) -> RolloutEngine:
    """The engine a config names: ``spec`` is a ``ROLLOUT_ENGINES`` name (``"hf"``, ``"vllm"``), a mapping
    ``{"name": <name>, <options>}`` or an engine object (returned as it is); None is ``"hf"``. ``defaults``
    (e.g. ``record_signals``, a ``processor``) go to an engine whose constructor takes them, unless the spec
    sets them. A bad spec is a ``UserError`` naming the known engines, an unknown option or a refused value one
    naming the engine."""
    if spec is None:
        spec = "hf"
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, dict):
        if isinstance(spec, RolloutEngine):
            return spec
        raise UserError(f"engine must be a name ({', '.join(ROLLOUT_ENGINES.names())}), a mapping "
                        f"{{name: ..., <options>}} or an engine object, got {type(spec).__name__}")
    options = dict(spec)
    name = options.pop("name", None)
    if name not in ROLLOUT_ENGINES:
        raise UserError(f"engine name must be one of {', '.join(ROLLOUT_ENGINES.names())}, got {name!r}")
    cls = ROLLOUT_ENGINES[name]
    takes = inspect.signature(cls).parameters  # a default the engine has no use for is not passed
    options = {**{k: v for k, v in defaults.items() if k in takes}, **options}
    try:
        return cls(tokenizer, **options)
    except (TypeError, ValueError) as err:  # an option the engine does not take, or a value it refuses
        raise UserError(f"engine {name}: {err}") from None


@contextlib.contextmanager
def plain_generation_config(model) -> Iterator[None]:
    """Within the block, ``model.generation_config`` holds the model's special token ids and nothing else, so
    a model folder's own ``generation_config`` (``no_repeat_ngram_size``, a repetition penalty, its own
    temperature or top-k) is ignored on every path: HF ``generate`` at any batch size, the image path and the
    agent's turns (which call ``generate`` inside it), prompt-shared sampling and vLLM alike (which never
    read it); ``SamplingParams`` alone decide the sampling. (It applied at ``ttrl generate --batch-size 1``
    only, so one model sampled two ways.) Passing a config to ``generate`` is not enough: transformers fills
    the fields a passed config leaves at their defaults from the model's own."""
    from transformers import GenerationConfig

    target = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model's own
    own = getattr(target, "generation_config", None)
    ids = {k: getattr(own, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id",
                                             "decoder_start_token_id")}
    target.generation_config = GenerationConfig(**{k: v for k, v in ids.items() if v is not None})
    try:
        yield
    finally:
        target.generation_config = own


@contextlib.contextmanager
def sampling_mode(model, seed: int | None) -> Iterator[None]:
    """``model`` in eval mode and, when ``seed`` is given, the CPU RNG forked and seeded with it (the caller's
    global RNG is untouched); the model's previous train/eval mode is restored on exit. Every engine samples
    inside it, so a seeded rollout is reproducible."""
    was_training = model.training
    model.eval()
    rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    try:
        with rng:
            if seed is not None:
                torch.manual_seed(seed)
            yield
    finally:
        model.train(was_training)


def context_length(model) -> int | None:
    """The positions ``model`` was built for: its config's ``max_position_embeddings`` (a vision-language
    model's text config's), or None when the config does not say."""
    config = getattr(model, "config", None)
    get_text = getattr(config, "get_text_config", None)
    text = get_text() if callable(get_text) else getattr(config, "text_config", None)
    for cfg in (config, text):
        value = getattr(cfg, "max_position_embeddings", None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def context_limit(engine, model) -> int | None:
    """The context ``engine`` samples ``model`` within (None: the HF path, which samples ``model`` itself): an
    engine's ``max_model_len`` once it is set, else the model's own (:func:`context_length`, also what vLLM defaults to)."""
    return (engine.max_model_len if engine is not None else None) or context_length(model)


#: characters below which a prompt is tokenized before its context is checked (milliseconds of work)
CHEAP_TO_TOKENIZE = 65_536


def max_token_chars(tokenizer) -> int:
    """An upper bound on the characters one token of ``tokenizer`` decodes to: the longest vocabulary entry
    (a byte-level BPE entry has one character per byte, a SentencePiece entry one per character), cached on
    the tokenizer. So a text of ``c`` characters has at least ``ceil(c / max_token_chars)`` tokens."""
    cached = getattr(tokenizer, "_ttrl_max_token_chars", None)
    if cached is None:
        vocab = tokenizer.get_vocab()
        cached = max((len(t) for t in vocab), default=1) or 1
        try:
            tokenizer._ttrl_max_token_chars = cached
        except AttributeError:  # a tokenizer that takes no new attributes: computed again next time
            pass
    return cached


def check_context_chars(texts: Sequence[str], max_new_tokens: int, limit: int | None, tokenizer, what: str,
                        names: Sequence[str] | None = None) -> None:
    """Refuse, before tokenizing, a text that cannot fit: one whose fewest possible tokens
    (``ceil(len / max_token_chars)``) plus ``max_new_tokens`` exceed ``limit`` (the same ``UserError`` as
    :func:`check_context`, which the caller runs on the real counts afterwards). Tokenizing a 50 MB prompt
    took minutes and 19 GB before it was refused. Texts up to ``CHEAP_TO_TOKENIZE`` characters are left to
    the exact count, whose message names the real number of tokens."""
    if limit is None:
        return
    per_token = max_token_chars(tokenizer)
    for i, text in enumerate(texts):
        if len(text) <= CHEAP_TO_TOKENIZE:
            continue
        fewest = -(-len(text) // per_token)
        if fewest + max_new_tokens > limit:
            who = f"question {names[i]!r}" if names is not None else f"prompt {i} ({text[:40]!r}...)"
            raise UserError(f"{who}: {len(text):,} characters, so at least {fewest:,} prompt tokens (at most "
                            f"{per_token} characters a token), + max_new_tokens {max_new_tokens} exceed {what} "
                            f"({limit} tokens); shorten it or lower --max-new-tokens / max_new_tokens")


def check_context(prompt_lengths: Sequence[int], max_new_tokens: int, limit: int | None, what: str,
                  names: Sequence[str] | None = None, prompts: Sequence[str] | None = None) -> None:
    """Refuse, before anything is sampled, a prompt whose tokens plus ``max_new_tokens`` exceed ``limit``
    (``what``: whose limit it is, for the message): a ``UserError`` naming the prompt (``names[i]``, else its
    index and first characters). Without the check a 200k-character prompt runs for minutes and a long one
    ends in an out-of-memory traceback. ``limit`` None: nothing to check."""
    if limit is None:
        return
    for i, n in enumerate(prompt_lengths):
        if n + max_new_tokens > limit:
            if names is not None:
                who = f"question {names[i]!r}"
            else:
                who = f"prompt {i}" + (f" ({prompts[i][:40]!r}...)" if prompts is not None else "")
            raise UserError(f"{who}: {n} prompt tokens + max_new_tokens {max_new_tokens} exceed {what} ({limit} "
                            "tokens); shorten it or lower --max-new-tokens / max_new_tokens")

"""Model and tokenizer loading: a local HF checkpoint, or a tiny randomly initialised model for CPU runs.

A model is named by one string:

* ``"tiny:<arch>"`` (``tiny:qwen2``, ``tiny:llama``) builds a 2-layer, 32-wide model of that real
  architecture with random weights and a character-level tokenizer made in code (no download);
  ``tiny:qwen2_vl`` is a tiny Qwen2-VL (a 1-block vision tower, M-RoPE; ``tiny:qwen2_5_vl`` its Qwen2.5-VL twin) whose character tokenizer also has
  Qwen's chat and vision markers and a chat template, with a tiny processor (:class:`TinyVLProcessor`:
  transformers' Qwen2-VL image processor, built in code, at most 112 x 112 pixels, so an image is 16 tokens);
* a ``*.ckpt`` file written by ``ttrl fit`` (any phase: the policy of an SFT run starts TTRL) is rebuilt
  from the ``PolicySpec`` saved in it and loaded with its policy weights (LoRA adapters merged), so a later
  phase starts where the earlier one ended (``checkpoints.policy_state_from_checkpoint``);
* anything else is a local path (or hub id, if the hub is reachable) given to ``from_pretrained``.

LoRA (PEFT) is optional: ``lora={"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}``.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import string
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ttrl_lightning.checkpoints import first_non_finite, is_checkpoint_path, policy_state_from_checkpoint
from ttrl_lightning.errors import UserError, first_line, shown
from ttrl_lightning.registry import Registry
from ttrl_lightning.tools.protocol import TOOL_TOKENS

# Special tokens of the built-in character tokenizer: padding / sequence markers, then the tool-call
# protocol's tokens (call and observation delimiters, the hidden-observation token; tools/protocol.py).
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", *TOOL_TOKENS]
CHAR_ALPHABET = string.digits + string.ascii_letters + string.punctuation + " \n"

TINY_CONFIGS: Registry = Registry("tiny model config")


def build_char_tokenizer(alphabet: str = CHAR_ALPHABET, specials: list[str] | None = None):
    """A ``PreTrainedTokenizerFast`` with one token per character of ``alphabet`` plus ``specials``.

    Built in code with ``tokenizers`` (WordLevel model on single characters), so no file is downloaded.
    Special tokens are matched as whole strings before splitting, e.g. ``CALL_START`` (``"<call>"``) is one
    token.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = list(SPECIAL_TOKENS if specials is None else specials)
    chars = [c for c in dict.fromkeys(alphabet)]
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        additional_special_tokens=[s for s in specials if s not in {"<pad>", "<eos>", "<bos>", "<unk>"}],
    )
    fast.padding_side = "left"
    return fast


def _common(tokenizer, hidden: int, layers: int, heads: int, kv_heads: int, max_pos: int) -> dict[str, Any]:
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_pos,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )


@TINY_CONFIGS.register("qwen2")
def _tiny_qwen2(tokenizer, hidden=32, layers=2, heads=4, kv_heads=2, max_pos=256):
    from transformers import Qwen2Config

    return Qwen2Config(**_common(tokenizer, hidden, layers, heads, kv_heads, max_pos))


@TINY_CONFIGS.register("llama")
def _tiny_llama(tokenizer, hidden=32, layers=2, heads=4, kv_heads=2, max_pos=256):
    from transformers import LlamaConfig

    return LlamaConfig(**_common(tokenizer, hidden, layers, heads, kv_heads, max_pos))


#: Qwen's chat and vision markers, added to the character tokenizer of the tiny vision-language models
TINY_VL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                  "<|video_pad|>"]
#: the chat template of the tiny vision-language models (Qwen's layout: an image is
#: ``<|vision_start|><|image_pad|><|vision_end|>``, the processor repeats ``<|image_pad|>`` per image token)
TINY_VL_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}")
#: tiny architectures that are vision-language models (their tokenizer has TINY_VL_TOKENS)
TINY_VL_ARCHS = ("qwen2_vl", "qwen2_5_vl")


def build_tiny_vl_tokenizer():
    """The character tokenizer plus :data:`TINY_VL_TOKENS` and :data:`TINY_VL_CHAT_TEMPLATE`."""
    tok = build_char_tokenizer(specials=SPECIAL_TOKENS + TINY_VL_TOKENS)
    tok.chat_template = TINY_VL_CHAT_TEMPLATE
    return tok


def _tiny_vl_parts(tokenizer, hidden, layers, heads, kv_heads, max_pos, vocab, intermediate):
    """The text config (with M-RoPE) and the vision token ids shared by the tiny Qwen2-VL and Qwen2.5-VL."""
    head_pairs = hidden // heads // 2
    rope = {"rope_type": "default", "rope_theta": 10000.0,
            "mrope_section": [head_pairs - 2 * (head_pairs // 4), head_pairs // 4, head_pairs // 4]}
    text = dict(_common(tokenizer, hidden, layers, heads, kv_heads, max_pos), rope_parameters=rope)
    if vocab is not None:
        text["vocab_size"] = max(vocab, len(tokenizer))
    if intermediate is not None:
        text["intermediate_size"] = intermediate
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    return text, ids


@TINY_CONFIGS.register("qwen2_vl")
def _tiny_qwen2_vl(tokenizer, hidden=32, layers=2, heads=4, kv_heads=2, max_pos=1024, vocab=None,
                   intermediate=None, vision_depth=1, vision_width=None, vision_heads=2):
    """A tiny Qwen2-VL: the text model of :func:`_common` with M-RoPE (sections 2/1/1 of the head's 4
    frequency pairs at the default size) and a ``vision_depth``-block vision tower of width ``vision_width``
    (default ``hidden``; patch 14, 2 x 2 merge). ``vocab`` (at least the tokenizer's) and ``intermediate``
    (default ``2 hidden``) size the text model for benchmarks (``benchmarks/engines/generate_signals.py``)."""
    from transformers import Qwen2VLConfig

    text, ids = _tiny_vl_parts(tokenizer, hidden, layers, heads, kv_heads, max_pos, vocab, intermediate)
    vision = dict(depth=vision_depth, embed_dim=vision_width or hidden, hidden_size=hidden,
                  num_heads=vision_heads, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                  in_channels=3)
    return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)


@TINY_CONFIGS.register("qwen2_5_vl")
def _tiny_qwen2_5_vl(tokenizer, hidden=32, layers=2, heads=4, kv_heads=2, max_pos=1024, vocab=None,
                     intermediate=None, vision_depth=1, vision_width=None, vision_heads=2):
    """A tiny Qwen2.5-VL (the architecture of VisConf's Qwen2.5-VL-3B and of MM-UPT): the text model of
    :func:`_tiny_qwen2_vl` and Qwen2.5-VL's windowed vision tower (RMSNorm, SwiGLU MLP; window 56 pixels,
    block 0 with full attention), randomly initialised from the transformers config class, for checking
    the GPU recipe (``configs/ttrl/visconf_qwen2.5_vl_3b.yaml``) on a CPU."""
    from transformers import Qwen2_5_VLConfig

    text, ids = _tiny_vl_parts(tokenizer, hidden, layers, heads, kv_heads, max_pos, vocab, intermediate)
    width = vision_width or hidden
    vision = dict(depth=vision_depth, hidden_size=width, intermediate_size=2 * width, num_heads=vision_heads,
                  out_hidden_size=hidden, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                  in_channels=3, window_size=56, fullatt_block_indexes=[0])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)


class TinyVLProcessor:
    """The processor of the tiny vision-language models, built in code: what transformers' Qwen2-VL processor
    does, for the character tokenizer (the stock processor class also needs torchvision for videos).

    ``apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`` -> the prompt text (the
    tokenizer's template); ``__call__(text=[...], images=[[PIL image, ...] per text] | None)`` -> a batch
    with ``input_ids`` / ``attention_mask`` (left padded), ``pixel_values``, ``image_grid_thw`` and
    ``mm_token_type_ids`` (1 at image tokens): every ``<|image_pad|>`` of a text becomes
    ``prod(grid_thw) / merge^2`` of them, one per merged patch of its image, as in Qwen2-VL.
    """

    def __init__(self, tokenizer, min_pixels: int = 56 * 56, max_pixels: int = 112 * 112):
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        self.tokenizer = tokenizer
        self.chat_template = tokenizer.chat_template
        self.image_processor = Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels,
                                                        patch_size=14, merge_size=2, temporal_patch_size=2)
        self.image_token = "<|image_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)

    def save_pretrained(self, folder: str) -> None:
        """Write the image processor's ``preprocessor_config.json`` (its pixel bounds, patch and merge sizes) to
        ``folder``: what an engine that loads the model from a folder (vLLM) resizes images with. The
        tokenizer is saved on its own."""
        self.image_processor.save_pretrained(folder)

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True, **kw):
        return self.tokenizer.apply_chat_template(messages, tokenize=tokenize,
                                                  add_generation_prompt=add_generation_prompt, **kw)

    def __call__(self, text, images=None, return_tensors: str = "pt", padding: bool = True, **kwargs):
        texts = [text] if isinstance(text, str) else list(text)
        flat = [img for row in (images or [])
                for img in (row if isinstance(row, (list, tuple)) else [row])]
        out = {}
        if flat:
            vision = self.image_processor(images=flat, return_tensors="pt")
            out.update(pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"])
            counts = (vision["image_grid_thw"].prod(-1) // self.image_processor.merge_size ** 2).tolist()
            k = 0
            expanded = []
            for t in texts:
                parts = t.split(self.image_token)
                pieces = [parts[0]]
                for part in parts[1:]:
                    if k >= len(counts):
                        raise ValueError("more image placeholders in the text than images")
                    pieces.append(self.image_token * counts[k] + part)
                    k += 1
                expanded.append("".join(pieces))
            if k != len(counts):
                raise ValueError(f"{len(counts)} images for {k} image placeholders in the text")
            texts = expanded
        enc = self.tokenizer(texts, return_tensors="pt", padding=padding, add_special_tokens=False)
        out.update(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                   mm_token_type_ids=(enc["input_ids"] == self.image_token_id).long())
        return out


#: Qwen's vision markers; an image in a text is ``IMAGE_PLACEHOLDER``, which a processor expands to one
#: ``<|image_pad|>`` per merged patch. A VLM agent never samples them (only the engine places images).
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


@dataclass(frozen=True)
class VisionBlock:
    """One image shown to a vision-language agent: its ``ids`` in the context (``<|vision_start|>``, one
    ``token_id`` per merged patch, ``<|vision_end|>``), and the processor's ``pixel_values`` / ``grid_thw``."""

    ids: tuple[int, ...]
    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    token_id: int


def vision_block(processor, image) -> VisionBlock:
    """``image`` (PIL / HxWx3 uint8) as a :class:`VisionBlock` of ``processor`` (a Qwen2-VL processor or
    ``models.TinyVLProcessor``): the processor expands Qwen's ``<|vision_start|><|image_pad|><|vision_end|>``."""
    from PIL import Image

    pil = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image, dtype=np.uint8))
    enc = processor(text=[IMAGE_PLACEHOLDER], images=[pil], return_tensors="pt")
    token_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    return VisionBlock(tuple(enc["input_ids"][0].tolist()), enc["pixel_values"], enc["image_grid_thw"], token_id)


def image_settings(processor) -> dict:
    """How ``processor`` turns an image into vision tokens: its pixel bounds (``min_pixels`` / ``max_pixels``, or
    transformers' ``size`` edges), patch, merge and temporal patch sizes; what a resumed run must keep."""
    ip = getattr(processor, "image_processor", processor)
    size = getattr(ip, "size", None)

    def field(name):
        value = getattr(ip, name, None)
        if value is None and size is not None:
            value = size.get(name) if isinstance(size, dict) else getattr(size, name, None)
        return value
    return {name: field(name) for name in ("min_pixels", "max_pixels", "shortest_edge", "longest_edge",
                                           "patch_size", "merge_size", "temporal_patch_size")}


#: the pixel inputs of a vision-language batch (``vision_inputs``), passed to the model beside the ids
VISION_INPUTS = ("pixel_values", "image_grid_thw", "mm_token_type_ids")


def vision_inputs(blocks, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The pixel inputs of a batch whose rows show ``blocks`` (every row's :class:`VisionBlock` s, rows in
    order, each row's in the order of its tokens): ``pixel_values`` and ``image_grid_thw`` concatenated, and
    ``mm_token_type_ids`` (1 at the image tokens of ``input_ids``), from which Qwen2-VL computes its M-RoPE
    positions. Empty without blocks."""
    blocks = list(blocks)
    if not blocks:
        return {}
    device = input_ids.device
    return {"pixel_values": torch.cat([b.pixel_values for b in blocks]).to(device),
            "image_grid_thw": torch.cat([b.grid_thw for b in blocks]).to(device),
            "mm_token_type_ids": (input_ids == blocks[0].token_id).long()}


def is_vision_config(config) -> bool:
    """Whether a model config describes a vision-language model (it has a ``vision_config``)."""
    return getattr(config, "vision_config", None) is not None


def _auto_model_class(config):
    """``AutoModelForImageTextToText`` for a vision-language config, else ``AutoModelForCausalLM``."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vision_config(config) else AutoModelForCausalLM


def auto_mapped_file(folder: str) -> str | None:
    """The first JSON file of ``folder`` (sorted by name) that maps a class to the folder's own code: a top-level
    ``auto_map`` key. Every ``*.json`` file is read, not a list of names: transformers' sub-loaders read config,
    tokenizer, processor, image-, video- and feature-processor and generation files, some of them without passing
    ``trust_remote_code`` on (the video processor asked ``[y/N]`` on stdin). Each file is parsed, never searched
    for bytes: a key spelt with a JSON escape (``"auto\\u005fmap"``) is ``auto_map`` to transformers too."""
    try:
        names = sorted(f for f in os.listdir(folder) if f.endswith(".json"))
    except OSError:
        return None
    for file in names:
        path = os.path.join(folder, file)
        try:
            with open(path, "rb") as fh:
                content = json.loads(fh.read())  # bytes: UTF-8 (with or without a BOM), UTF-16 or UTF-32
        except (OSError, ValueError, RecursionError):
            continue  # transformers reports an unreadable file of its own itself
        if isinstance(content, dict) and "auto_map" in content:
            return file
    return None


#: what a loader raises where transformers would run a model folder's own code or ask whether to
REMOTE_CODE_REFUSED = "the folder's own code is never run (trust_remote_code=False)"


def _refuse_remote_code(*_args, **_kwargs):
    """Stands in for transformers' import of a folder's module (and for ``input``) while a folder loads."""
    raise ValueError(f"{REMOTE_CODE_REFUSED}; trust_remote_code is never asked for")


@contextlib.contextmanager
def no_remote_code():
    """While a folder loads, no prompt can be answered and no folder module can be imported, whatever a
    transformers loader is passed: a sub-loader that is not given ``trust_remote_code`` (the video processor
    inside ``AutoProcessor``) asks ``[y/N]`` on stdin and imports the module on ``y``. Inside this block
    transformers' prompt timeout is 0 (it raises instead of asking), ``input`` raises and ``sys.stdin`` is
    empty, and ``dynamic_module_utils.get_class_in_module`` (the one place a folder's module is imported)
    raises; each is restored afterwards. A refusal is a ``ValueError`` naming ``trust_remote_code``, which
    :func:`from_pretrained` turns into one line."""
    import builtins
    import io
    import sys

    from transformers import dynamic_module_utils as dynamic

    saved = (dynamic.TIME_OUT_REMOTE_CODE, dynamic.get_class_in_module, builtins.input, sys.stdin)
    dynamic.TIME_OUT_REMOTE_CODE = 0
    dynamic.get_class_in_module = _refuse_remote_code
    builtins.input = _refuse_remote_code
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        dynamic.TIME_OUT_REMOTE_CODE, dynamic.get_class_in_module, builtins.input, sys.stdin = saved


#: the JSON files of a model folder that transformers reads as settings: each must be an object of finite values
SETTINGS_FILES = ("config.json", "tokenizer_config.json", "generation_config.json", "preprocessor_config.json",
                  "processor_config.json", "video_preprocessor_config.json")


def _non_finite(value, where: str = "") -> tuple[str, float] | None:
    """``(path, value)`` of the first non-finite float (``NaN``, ``Infinity``) in a parsed JSON value, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def estimated_parameters(config: dict) -> int:
    """The parameters a decoder config describes, from its sizes alone (before anything is built): per layer the
    attention (q, k, v, o) and the gated MLP, plus the embeddings (twice when untied); a vision-language config's
    ``text_config`` when it has one, and its vision tower's blocks (:func:`_vision_parameters`). Rough (biases,
    norms, a vision tower's patch embedding and merger are left out): a bound's estimate."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config

    def size(key: str, default: int = 0) -> int:
        value = text.get(key, config.get(key, default))
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0

    h, layers, vocab = size("hidden_size"), size("num_hidden_layers"), size("vocab_size")
    inter = size("intermediate_size") or 4 * h
    heads = size("num_attention_heads") or 1
    kv = size("num_key_value_heads") or heads
    head_dim = size("head_dim") or (h // heads if heads else 0)
    attention = h * heads * head_dim * 2 + h * kv * head_dim * 2
    embeddings = vocab * h * (1 if text.get("tie_word_embeddings", config.get("tie_word_embeddings", True)) else 2)
    return layers * (attention + 3 * h * inter) + embeddings + _vision_parameters(config.get("vision_config"))


def _vision_parameters(vision) -> int:
    """The parameters of a vision tower's blocks (``vision_config``: ``depth`` blocks of width ``embed_dim`` or
    ``hidden_size``, attention and an MLP of ``intermediate_size`` or ``mlp_ratio`` times the width), 0 without
    one: a tower of depth 10^6 is refused before it is built, as a text model of that depth is."""
    if not isinstance(vision, dict):
        return 0

    def size(*keys: str) -> int:
        for key in keys:
            value = vision.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
                return int(value)
        return 0

    width, depth = size("embed_dim", "hidden_size"), size("depth", "num_hidden_layers")
    ratio = vision.get("mlp_ratio")
    ratio = ratio if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0 < ratio < 1e6 else 4
    inter = size("intermediate_size") or int(width * ratio)
    return depth * (4 * width * width + 2 * width * inter)


def max_parameters() -> int:
    """The most parameters a model folder may describe here: this machine's memory over 4 bytes (float32), so a
    config that cannot fit is refused before its build starts (``num_hidden_layers: 1000000`` built for minutes)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 10**11


def check_settings_files(folder: str) -> None:
    """Each settings file of ``folder`` (:data:`SETTINGS_FILES`) that exists is a JSON object of finite numbers,
    and ``config.json`` describes a model this machine can hold (:func:`max_parameters`); else one ``UserError``
    naming the file and the key."""
    for file in SETTINGS_FILES:
        path = os.path.join(folder, file)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                content = json.load(fh)
        except (OSError, ValueError):
            continue  # unreadable or not JSON: transformers' own error says so, one line (_bad_config)
        if not isinstance(content, dict):
            raise UserError(f"{path}: must be a JSON object of settings, got a JSON {type(content).__name__}")
        bad = _non_finite(content)
        if bad is not None:
            raise UserError(f"{path}: {bad[0]} is not a finite number ({bad[1]!r})")
        if file == "config.json":
            count, limit = estimated_parameters(content), max_parameters()
            if count > limit:
                raise UserError(f"{path}: the sizes describe about {count:,} parameters, more than this machine's "
                                f"memory holds in float32 ({limit:,})")


def _looks_like_a_path(name: str) -> bool:
    """A name that can only be a local path, never a hub id (``namespace/name``): absolute, ``./`` / ``../`` /
    ``~`` first, or more than one ``/``."""
    return (os.path.isabs(name) or name.startswith(("./", "../", "~", "." + os.sep)) or name.count("/") > 1
            or name in (".", ".."))


def from_pretrained(cls, name: str, **kwargs):
    """``cls.from_pretrained(name, trust_remote_code=False, **kwargs)``: a model folder's own code is never
    run, and transformers never asks on stdin whether to run it (:func:`no_remote_code`, for the sub-loaders
    that ``trust_remote_code`` does not reach). A folder any of whose JSON files maps a class to its own module
    (``auto_map``, :func:`auto_mapped_file`) is one ``UserError`` before transformers reads it."""
    if not os.path.isdir(name) and _looks_like_a_path(name):  # HF would take it for a hub id: a traceback
        what = "is a file, not a model folder" if os.path.exists(name) else "does not exist"
        raise UserError(f"{name} {what}; give tiny:<arch>, a Hugging Face checkpoint folder or a .ckpt written by "
                        "`ttrl fit`")
    if os.path.isdir(name):
        file = auto_mapped_file(name)
        if file is not None:
            raise UserError(f"{name}: the folder asks to run its own code to load (auto_map in {file}); "
                            "ttrl never runs a model folder's code (trust_remote_code=False)")
        check_settings_files(name)
    with _held_load_report(), no_remote_code():
        try:
            return cls.from_pretrained(name, trust_remote_code=False, **kwargs)
        except Exception as err:  # noqa: BLE001 - sorted below: the folder's own code, its config, or re-raised
            cause = None if isinstance(err, (UserError, OSError)) else _config_error(cls, name, err)
            if any(isinstance(e, ValueError) and "trust_remote_code" in str(e) for e in (err, cause)):
                raise UserError(f"{name}: the folder asks to run its own code to load; ttrl never runs a model "
                                "folder's code (trust_remote_code=False)") from None
            if cause is None:
                raise
            raise _bad_config(name, cause) from None


def _config_error(cls, name: str, err: BaseException) -> BaseException | None:
    """The error of the folder's own config when it is what failed (a field of the wrong type, an unknown model
    type, not an object): ``err`` itself when ``cls`` is ``AutoConfig``, else what ``AutoConfig`` raises on the
    folder; None when the config reads."""
    if getattr(cls, "__name__", "") == "AutoConfig":
        content = isinstance(err, (TypeError, ValueError, KeyError, AttributeError)) or \
            "Validation" in type(err).__name__
        return err if content else None
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(name, trust_remote_code=False)
    except OSError:
        return None
    except Exception as config_err:  # noqa: BLE001 - the config itself cannot be read
        return config_err
    return None


def _bad_config(name: str, err: BaseException) -> UserError:
    """A folder's ``config.json`` that transformers cannot read as a model config, in one line."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()] or [type(err).__name__]
    text = " ".join(lines[:2])[:240]
    return UserError(f"{os.path.join(name, 'config.json')}: not a usable model config ({type(err).__name__}: {text})")


@contextlib.contextmanager
def _held_load_report():
    """Hold back what transformers logs while loading (its loading report, a table of every mismatched weight,
    and its warnings about the weights: "This checkpoint seem corrupted", "add is_decoder=True"): shown as it was
    when the load succeeds, dropped when it fails, where the one-line error says what went wrong. A load refused
    after transformers returned (``load_model``'s check that every weight was loaded) runs inside the hold too.
    Nested holds pass what they held to the outer one."""
    import logging

    # the report goes to the logger its caller passes (modeling_utils'), else to loading_report's own; every other
    # record of the library reaches the handlers of its root logger ("transformers", which does not propagate)
    loggers = [logging.getLogger(n) for n in ("transformers.modeling_utils", "transformers.utils.loading_report")]
    handlers = list(logging.getLogger("transformers").handlers)
    held: list[logging.LogRecord] = []
    seen: set[int] = set()

    def hold(record: logging.LogRecord) -> bool:
        if id(record) not in seen:  # a record passes a logger's filter and then its handler's: held once
            seen.add(id(record))
            held.append(record)
        return False

    for logger in loggers:
        logger.addFilter(hold)
    for handler in handlers:
        handler.addFilter(hold)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(hold)
        for handler in handlers:
            handler.removeFilter(hold)
    for record in held:  # reached only when the load succeeded
        logging.getLogger(record.name).handle(record)


def load_processor(name: str):
    """The processor that turns a question with images into model inputs, or None for a text-only model:
    ``tiny:<vl arch>`` -> :class:`TinyVLProcessor`; a ``ttrl fit`` checkpoint -> its base model's; a Hugging
    Face folder of a vision-language model (its config has a ``vision_config``) -> ``AutoProcessor``."""
    if is_checkpoint_path(name):
        return load_processor(checkpoint_model_name(name))
    if is_tiny(name):
        arch = name.split(":", 1)[1]
        return TinyVLProcessor(load_tokenizer(name)) if arch in TINY_VL_ARCHS else None
    from transformers import AutoConfig, AutoProcessor

    if not is_vision_config(from_pretrained(AutoConfig, name)):
        return None
    try:
        processor = from_pretrained(AutoProcessor, name)
    except (OSError, ValueError) as err:  # transformers' multi-line "Can't load image processor ..."
        raise UserError(f"{name}: a vision-language model without a loadable processor ({first_line(err, 160)}); "
                        "save its processor into the folder (processor.save_pretrained) to show it images") from None
    except ImportError as err:  # Qwen2-VL's video processor needs torchvision, which the CPU install leaves out
        raise UserError(f"{name}: transformers builds this model's processor with a package that is not installed "
                        f"({_missing_package(err)}); install it for this torch version to load the folder's "
                        "processor") from None
    check_chat_template(processor, name)
    return processor


def _missing_package(err: ImportError) -> str:
    """The package an ``ImportError`` names: its ``name``, or the library transformers' message says it requires."""
    if err.name:
        return err.name
    import re

    found = re.search(r"requires the (\w+) library", str(err))
    return found.group(1).lower() if found else first_line(err, 120)


def is_tiny(name: str) -> bool:
    return name.startswith("tiny:")


def check_tiny_name(name: str, where: str) -> None:
    """``UserError`` (``"<where>: unknown tiny architecture 'x'; known: tiny:..."``) for a ``tiny:<arch>``
    name whose architecture is not registered; any other name passes."""
    if is_tiny(name) and name.split(":", 1)[1] not in TINY_CONFIGS:
        raise UserError(f"{where}: unknown tiny architecture {name.split(':', 1)[1]!r}; known: "
                        f"{', '.join('tiny:' + a for a in TINY_CONFIGS.names())}")


def checkpoint_model_name(path: str) -> str:
    """The model name saved in the ``ttrl fit`` checkpoint ``path`` (its ``PolicySpec.model``)."""
    spec, _ = policy_state_from_checkpoint(path)
    return spec["model"]


def load_tokenizer(name: str):
    """Tokenizer for model ``name`` (``tiny:<arch>`` -> the built-in character tokenizer; a ``ttrl fit``
    checkpoint -> the tokenizer of the model it was trained from)."""
    if is_checkpoint_path(name):
        return load_tokenizer(checkpoint_model_name(name))
    if is_tiny(name):
        return build_tiny_vl_tokenizer() if name.split(":", 1)[1] in TINY_VL_ARCHS else build_char_tokenizer()
    from transformers import AutoTokenizer

    tok = from_pretrained(AutoTokenizer, name)
    check_chat_template(tok, name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


#: the chat-template probe: one user message, rendered within this time and output length
TEMPLATE_PROBE = [{"role": "user", "content": "What is 1 + 1?"}]
TEMPLATE_SECONDS = 5.0
TEMPLATE_MAX_CHARS = 100_000


def check_chat_template(tok, name: str) -> None:
    """Render a folder's chat template once on :data:`TEMPLATE_PROBE` when the tokenizer (or a vision-language
    model's processor, which renders that model's prompts: one image part, then the text) is loaded, so a
    template that does not parse, raises, or runs away (a loop that filled 5 GB in 33 s) is one
    :class:`UserError` naming the folder, not a traceback (or a hang) at the first prompt. The render is stopped
    after :data:`TEMPLATE_SECONDS` (``answers.budget.time_limit``: pure-Python loops are interrupted) and its
    text may hold at most :data:`TEMPLATE_MAX_CHARS` characters. A folder without a template is left alone."""
    if not getattr(tok, "chat_template", None):
        return
    from ttrl_lightning.answers.budget import ComparisonTimeout, time_limit

    try:
        with time_limit(TEMPLATE_SECONDS):
            text = tok.apply_chat_template(_template_probe(tok), tokenize=False, add_generation_prompt=True)
    except ComparisonTimeout:
        raise UserError(f"{name}: its chat template did not render a one-message prompt within "
                        f"{TEMPLATE_SECONDS:g} s; the template runs away") from None
    except Exception as e:  # noqa: BLE001 - a template error, whatever jinja or transformers raised, in one line
        raise UserError(f"{name}: its chat template cannot render a one-message prompt "
                        f"({type(e).__name__}: {first_line(e, 200)})") from None
    if not isinstance(text, str) or len(text) > TEMPLATE_MAX_CHARS:
        size = f"{len(text):,} characters" if isinstance(text, str) else type(text).__name__
        raise UserError(f"{name}: its chat template renders a one-message prompt as {size} (at most "
                        f"{TEMPLATE_MAX_CHARS:,})")


def _template_probe(owner) -> list[dict]:
    """:data:`TEMPLATE_PROBE` as ``owner`` is given prompts: a processor's user message is a list of parts (an
    image, then the text; ``prompt_format``), a tokenizer's a string."""
    if getattr(owner, "image_processor", None) is None:
        return TEMPLATE_PROBE
    return [{"role": m["role"], "content": [{"type": "image"}, {"type": "text", "text": m["content"]}]}
            for m in TEMPLATE_PROBE]


def _weights_error(error: BaseException) -> str | None:
    """What a model folder's weights did wrong, from the loader's error, or None for any other error: a truncated
    or corrupt safetensors file (safetensors' ``SafetensorError``), weights of another size than the config says
    (transformers' size-mismatch report)."""
    text = str(error)
    if type(error).__name__ == "SafetensorError":
        return f"a safetensors file is truncated or corrupt: {first_line(error)}"
    if isinstance(error, RuntimeError) and "negative dimension" in text:
        return f"the config's sizes do not make a model: {first_line(error)}"
    if isinstance(error, RuntimeError) and ("size mismatch" in text or "ignore_mismatched_sizes" in text):
        sizes = [ln.strip() for ln in text.splitlines() if "shape" in ln and ("checkpoint" in ln or "model" in ln)]
        return "the weights' shapes do not match the config" + (f": {sizes[0][:200]}" if sizes else "")
    return None


def _check_all_weights_loaded(name: str, config, info: dict) -> None:
    """Refuse a folder whose weight files lack weights of the model its ``config.json`` describes: transformers
    would initialise them at random and load the rest (a ``model_type`` over another architecture's weights
    loads with every weight random), a model that samples without an error and answers nothing."""
    missing = list(info.get("missing_keys") or [])
    if missing:
        raise UserError(f"{name}: {len(missing)} weights of the {getattr(config, 'model_type', '?')} model that "
                        f"config.json describes are not in its weight files (first: {sorted(missing)[0]!r}); "
                        "they would be random: the config does not match the weights")


def check_finite_weights(model: nn.Module, name: str) -> None:
    """Refuse a loaded model any of whose weights holds a NaN or an infinity: one ``UserError`` naming ``name``
    (the folder or checkpoint) and the weight. Such a model samples from NaN probabilities, which torch's
    sampler reports as a ``RuntimeError`` at the first token of the first question
    (``checkpoints.first_non_finite``: read in blocks, no copy of a whole weight)."""
    key = first_non_finite(model.named_parameters())
    if key is not None:
        raise UserError(f"{name}: the weight {key} holds non-finite values (NaN or infinity); the model would "
                        "sample from NaN probabilities: give weights that are numbers")


#: ``config.json`` keys whose value, where it is a number, must be a positive one (a norm's epsilon: a negative
#: ``rms_norm_eps`` makes the norm divide by the square root of a negative number, NaN at the first token)
POSITIVE_CONFIG_SUFFIXES = ("_eps", "epsilon", "rope_theta")
#: ``config.json`` keys whose value, where it is an int, is a size and must be >= 1
SIZE_CONFIG_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim", "depth", "embed_dim",
                    "num_heads", "patch_size", "spatial_merge_size", "temporal_patch_size")


def check_config_values(name: str, config) -> None:
    """Refuse a model config (and its sub-configs: ``text_config``, ``vision_config``) with a value no model can
    run with, before the model is built: an epsilon or ``rope_theta`` that is not a positive finite number
    (:data:`POSITIVE_CONFIG_SUFFIXES`), a size that is not at least 1 (:data:`SIZE_CONFIG_KEYS`). One
    ``UserError`` naming ``name``'s ``config.json`` and the key."""
    where = os.path.join(name, "config.json")

    def walk(values: dict, path: str) -> None:
        for key, value in values.items():
            at = f"{path}.{key}" if path else str(key)
            if isinstance(value, dict):
                walk(value, at)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if str(key).endswith(POSITIVE_CONFIG_SUFFIXES) and not (math.isfinite(value) and value > 0):
                raise UserError(f"{where}: {at} must be a positive number, got {shown(value)}")
            if key in SIZE_CONFIG_KEYS and isinstance(value, int) and value < 1:
                raise UserError(f"{where}: {at} must be a size >= 1, got {shown(value)}")

    walk(config.to_dict() if hasattr(config, "to_dict") else dict(config), "")


def load_model(
    name: str,
    tokenizer=None,
    *,
    tiny_kwargs: dict[str, Any] | None = None,
    lora: dict[str, Any] | None = None,
    dtype: str | None = None,
    seed: int = 0,
) -> nn.Module:
    """Causal LM for ``name``; ``tiny:<arch>`` is random-initialised from ``seed`` (same seed, same weights).

    ``lora``: PEFT ``LoraConfig`` keyword arguments; when given, the returned model is a ``PeftModel``
    whose only trainable parameters are the adapters.
    """

    if is_checkpoint_path(name):
        return load_checkpoint_policy(name, tokenizer, lora=lora, dtype=dtype)[0]
    if is_tiny(name):
        arch = name.split(":", 1)[1]
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name)
        config = TINY_CONFIGS[arch](tokenizer, **(tiny_kwargs or {}))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _auto_model_class(config).from_config(config)
        if dtype is not None:
            model = model.to(getattr(torch, dtype))
    else:
        kwargs = {}
        if dtype is not None:
            kwargs["dtype"] = getattr(torch, dtype)
        import pickle

        from transformers import AutoConfig

        with _held_load_report():  # a load refused below drops what transformers said about it
            try:
                config = from_pretrained(AutoConfig, name)
                check_config_values(name, config)
                model, info = from_pretrained(_auto_model_class(config), name, output_loading_info=True, **kwargs)
            except pickle.UnpicklingError as e:  # torch.load(weights_only=True) refused a pickled object
                blocked = next((ln.strip() for ln in str(e).splitlines() if "GLOBAL" in ln), "not plain tensors")
                raise UserError(f"{name}: a weight file holds objects other than tensors, which are not loaded "
                                f"({blocked})") from None
            except Exception as e:  # noqa: BLE001 - what a folder's weights do to the loader, named in one line
                reason = _weights_error(e)
                if reason is None:
                    raise
                raise UserError(f"{name}: the weights cannot be loaded ({reason})") from None
            _check_all_weights_loaded(name, config, info)
        check_finite_weights(model, name)
    if model.generation_config is not None and tokenizer is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    if lora:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as e:  # pragma: no cover - peft is a runtime requirement
            raise ImportError("LoRA needs `peft` (pip install peft)") from e
        cfg = dict(lora)
        cfg.setdefault("task_type", "CAUSAL_LM")
        model = get_peft_model(model, LoraConfig(**cfg))
    return model



def load_checkpoint_policy(path: str, tokenizer=None, *, lora=None, dtype=None) -> tuple[nn.Module, dict]:
    """``(policy, saved spec fields)`` of a ``ttrl fit`` checkpoint: the policy is rebuilt from the checkpoint's
    saved ``PolicySpec`` (model name, tiny sizes, LoRA, seed), its weights loaded strictly (a missing,
    unexpected or resized tensor is an error naming the file), LoRA adapters merged into the base weights;
    then cast to ``dtype`` (default: the spec's) and given new adapters ``lora`` when asked."""
    spec, state = policy_state_from_checkpoint(path)
    inner = spec.get("model")
    if not isinstance(inner, str) or not inner:
        raise UserError(f"checkpoint {path}: its saved policy spec names no model ({inner!r})")
    if is_checkpoint_path(inner):
        raise UserError(f"checkpoint {path} names another checkpoint ({inner}) as its model")
    try:
        model = load_model(inner, tokenizer, tiny_kwargs=spec.get("tiny_kwargs"), lora=spec.get("lora"),
                           dtype=spec.get("dtype"), seed=int(spec.get("seed", 0)))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"checkpoint {path}: its policy's base model {inner!r} cannot be loaded "
                        f"({first_line(e)})") from None
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # a tensor whose shape differs from the model's
        reason = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln), "")
        raise UserError(f"checkpoint {path}: the policy weights do not fit the model its spec builds "
                        f"({reason[:200] or first_line(e)})") from None
    if missing or unexpected:
        what = (f"missing {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                if missing else f"unexpected {unexpected[0]!r}")
        raise UserError(f"checkpoint {path}: the policy weights do not fit the model its spec builds ({what})")
    check_finite_weights(model, f"checkpoint {path}")
    if spec.get("lora"):
        model = model.merge_and_unload()
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    if lora:
        from peft import LoraConfig, get_peft_model

        cfg = dict(lora)
        cfg.setdefault("task_type", "CAUSAL_LM")
        model = get_peft_model(model, LoraConfig(**cfg))
    return model, spec

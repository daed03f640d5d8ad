"""Key groups for attention mass: which context positions are image, prompt text, generated or special tokens.

VisConf Sec. 3: v_t = A_I / (A_I + A_P + A_G) over image (I), prompt-text (P) and previously generated (G)
positions, excluding padding and non-image special tokens; LookBack's A_t is the image mass A_I.

"Special tokens" are every special id of the tokenizer (``tokenizer.all_special_ids``: chat-template markers
such as Qwen's ``<|im_start|>`` / ``<|im_end|>``, which act as attention sinks) plus the special ids named in
the model config. Without a tokenizer only the config's ids are known, and the tokenizer's other special
tokens fall into PROMPT; callers that have the tokenizer should pass it (``special_token_ids(config,
tokenizer)``, ``score_rollouts(..., tokenizer=)``, ``generate_with_signals(..., tokenizer=)``).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

PAD = -1
IMAGE = 0
PROMPT = 1
GENERATED = 2
SPECIAL = 3
NUM_GROUPS = 4
GROUP_NAMES = ("image", "prompt", "generated", "special")


def _config_ids(config, names) -> list[int]:
    ids = []
    for cfg in (config, getattr(config, "text_config", None)):
        if cfg is None:
            continue
        for name in names:
            value = getattr(cfg, name, None)
            if isinstance(value, int) and value not in ids:
                ids.append(value)
    return ids


def image_token_ids(config) -> list[int]:
    """Ids of placeholder tokens that carry image/video features (Qwen2-VL: image_token_id, video_token_id)."""
    return _config_ids(config, ("image_token_id", "video_token_id", "image_token_index"))


def special_token_ids(config, tokenizer=None) -> list[int]:
    """Special tokens: those named in the config (vision start/end markers, BOS/EOS/PAD) plus, when a
    ``tokenizer`` is given, all of its ``all_special_ids`` (chat markers such as ``<|im_start|>``, added
    special tokens). Image placeholders may be among them; ``key_groups_from_ids`` labels those IMAGE."""
    ids = _config_ids(
        config, ("vision_start_token_id", "vision_end_token_id", "bos_token_id", "eos_token_id", "pad_token_id")
    )
    if tokenizer is not None:
        for value in tokenizer.all_special_ids:
            if isinstance(value, int) and value not in ids:
                ids.append(value)
    return ids


def key_groups_from_ids(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    completion_mask: torch.Tensor | None,
    image_ids: Iterable[int] = (),
    special_ids: Iterable[int] = (),
    mm_token_type_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """key_groups: [B, T] int64 with PAD where attention_mask == 0, IMAGE at image placeholders (or where
    mm_token_type_ids > 0), GENERATED where completion_mask is set, SPECIAL at special ids, PROMPT elsewhere.
    Image placeholders win over the other labels; padding wins over everything."""
    groups = torch.full_like(input_ids, PROMPT, dtype=torch.long)
    special = torch.zeros_like(input_ids, dtype=torch.bool)
    for sid in special_ids:
        special |= input_ids == sid
    groups[special] = SPECIAL
    if completion_mask is not None:
        groups[completion_mask.bool()] = GENERATED
    image = torch.zeros_like(special)
    for iid in image_ids:
        image |= input_ids == iid
    if mm_token_type_ids is not None:
        image |= mm_token_type_ids > 0
    groups[image] = IMAGE
    if attention_mask is not None:
        groups[attention_mask == 0] = PAD
    return groups

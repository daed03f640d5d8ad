"""One prompt rule for every command that samples a question: ``ttrl fit`` (the RL modules' rollouts and
validation), ``ttrl eval`` and ``ttrl generate`` give a question file's prompt to the model the same way.

``prompt_format`` (one option, default ``"auto"``; the ``PROMPT_FORMATS``):

* ``chat``: the tokenizer's (or a vision-language processor's) chat template around one user message
  holding the prompt, with the generation prompt (``apply_chat_template(..., add_generation_prompt=True)``);
* ``plain``: the prompt as written;
* ``auto``: ``chat`` when the model has a chat template, else ``plain`` (the tiny models here have none, so
  their runs are unchanged).

A prompt that already holds the template is never wrapped twice: it is given as written when it starts
with what the template puts before the user's text (its system turn and user header) or ends with what it
puts after (the end of the user turn and the assistant header), compared without surrounding whitespace.
"""
from __future__ import annotations

from functools import lru_cache

from ttrl_lightning.errors import UserError

__all__ = ["PROMPT_FORMATS", "chat_template", "resolve_prompt_format", "is_templated", "format_prompt"]

PROMPT_FORMATS = ("auto", "chat", "plain")
#: a user message no real prompt contains, to find what the template puts around the user's text
_SENTINEL = "\x00ttrl-user-text\x00"


def chat_template(tokenizer, processor=None) -> str | None:
    """The chat template of the processor (first) or the tokenizer; None when neither has one."""
    for owner in (processor, tokenizer):
        template = getattr(owner, "chat_template", None) if owner is not None else None
        if template:
            return template
    return None


def resolve_prompt_format(prompt_format: str, tokenizer, processor=None) -> str:
    """``chat`` or ``plain`` (module docstring); ``chat`` for a model without a chat template is a
    ``UserError``."""
    if prompt_format not in PROMPT_FORMATS:
        raise UserError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    has = chat_template(tokenizer, processor) is not None
    if prompt_format == "auto":
        return "chat" if has else "plain"
    if prompt_format == "chat" and not has:
        raise UserError("prompt_format chat asks for the model's chat template, but it has none; use "
                        "prompt_format plain (or auto)")
    return prompt_format


def _owner(tokenizer, processor):
    """Who renders the template: a vision-language model's processor (it places the image tokens), else the
    tokenizer."""
    return processor if processor is not None else tokenizer


def _render(owner, text: str, images: int = 0, parts: bool = False) -> str:
    """The template around one user message: a list of parts (images, then the text) for a processor, as
    Qwen2-VL's examples write it, else the text."""
    content = [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": text}] if parts else text
    return owner.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                     add_generation_prompt=True)


@lru_cache(maxsize=32)
def _around(owner, parts: bool) -> tuple[str, str]:
    """What the template puts before and after a user message (whitespace stripped)."""
    before, _, after = _render(owner, _SENTINEL, parts=parts).partition(_SENTINEL)
    return before.strip(), after.strip()


def is_templated(text: str, tokenizer, processor=None) -> bool:
    """Whether ``text`` already holds the model's chat template (module docstring)."""
    if chat_template(tokenizer, processor) is None:
        return False
    owner = _owner(tokenizer, processor)
    before, after = _around(owner, owner is processor)
    body = text.strip()
    return bool(before and body.startswith(before)) or bool(after and body.endswith(after))


def format_prompt(text: str, prompt_format: str, tokenizer, processor=None, images: int = 0) -> str:
    """The model input of prompt ``text`` under ``prompt_format`` (``chat``, ``plain`` or ``auto``, resolved
    with :func:`resolve_prompt_format`); ``images``: image placeholders put before the text (a
    vision-language processor's template places their tokens)."""
    fmt = resolve_prompt_format(prompt_format, tokenizer, processor)
    if fmt == "plain" or is_templated(text, tokenizer, processor):
        return text
    owner = _owner(tokenizer, processor)
    return _render(owner, text, images, parts=owner is processor)

"""One prompt rule for every command that samples a question: ``ttrl fit`` (the RL modules' rollouts and
validation), ``ttrl eval`` and ``ttrl generate`` give a question file's prompt to the model the same way.

``prompt_format`` (one option, default ``"auto"``; the ``PROMPT_FORMATS``):

* ``chat``: the tokenizer's (or a vision-language processor's) chat template around one user message
  holding the prompt, with the generation prompt (``apply_chat_template(..., add_generation_prompt=True)``);
* ``plain``: the prompt as written;
* ``auto``: ``chat`` when the model has a chat template, else ``plain`` (the tiny models here have none, so
  their runs are unchanged).

A prompt that already holds the template is never wrapped twice. It holds the template when it begins with
what the template puts before the user's text (its system turn and user header) or holds its user header (a
prompt may have its own system turn, or none) and ends with what it puts after (the end of the user turn and
the generation prompt), compared without surrounding whitespace; it is then given as written. A prompt with
the template's user or assistant header but not that whole frame (a question that ends with the assistant
header, a user turn without the generation prompt) is one ``UserError`` saying what is missing: wrapping it
would template it twice, and leaving it would sample without a user turn or without the generation prompt.
A view that adds an instruction to a templated prompt (the reframed view) puts it inside the user turn
(:func:`with_user_text`), never before the system turn.
"""
from __future__ import annotations

from functools import lru_cache

from ttrl_lightning.errors import UserError

__all__ = ["PROMPT_FORMATS", "chat_template", "resolve_prompt_format", "is_templated", "format_prompt",
           "template_parts", "with_user_text"]

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


def _headers(before: str, after: str) -> tuple[str, str]:
    """The template's user header (the last line of what it puts before the user's text) and assistant
    header (the last line of what it puts after), e.g. ``<|im_start|>user`` / ``<|im_start|>assistant``."""
    user = before.splitlines()[-1].strip() if before else ""
    assistant = after.splitlines()[-1].strip() if after else ""
    return user, assistant


def template_parts(text: str, tokenizer, processor=None) -> tuple[str, str, str] | None:
    """``(head, user_text, tail)`` of a prompt that holds the model's chat template (module docstring), None for
    a prompt without any of its headers (a question to wrap) or a model without a template. A prompt with a
    header but not the whole frame is a ``UserError`` naming what it lacks."""
    if chat_template(tokenizer, processor) is None:
        return None
    owner = _owner(tokenizer, processor)
    before, after = _around(owner, owner is processor)
    user_header, assistant_header = _headers(before, after)
    body = text.strip()
    if before and body.startswith(before):
        lead = text.index(before) + len(before)
    elif user_header and user_header in body:  # its own system turn, or none: the last user turn's text
        lead = text.rindex(user_header) + len(user_header)
    else:
        lead = None
    ends = bool(after) and body.endswith(after)
    if lead is not None and ends:
        trail = text.rindex(after)
        return text[:lead], text[lead:trail], text[trail:]
    if lead is None and not (assistant_header and assistant_header in body):
        return None  # no header of the template: a question
    missing = (f"a user turn ({user_header!r})" if lead is None
               else f"the generation prompt at its end ({after[-60:]!r})")
    raise UserError(f"prompt {text[:60]!r}...: it holds part of the model's chat template but not {missing}; give "
                    "the question alone (the template is applied to it) or the whole templated prompt")


def is_templated(text: str, tokenizer, processor=None) -> bool:
    """Whether ``text`` already holds the model's chat template (module docstring; a partial template is a
    ``UserError``)."""
    return template_parts(text, tokenizer, processor) is not None


def with_user_text(text: str, change, tokenizer, processor=None) -> str:
    """``text`` with ``change(user text)`` in place of its user text when it holds the chat template (the
    system turn and headers kept around it), else ``change(text)``: a view's instruction goes inside the
    user turn of a templated prompt."""
    parts = template_parts(text, tokenizer, processor)
    if parts is None:
        return change(text)
    head, user, tail = parts
    lead = user[:len(user) - len(user.lstrip())]
    return head + lead + change(user.lstrip()) + tail


def format_prompt(text: str, prompt_format: str, tokenizer, processor=None, images: int = 0) -> str:
    """The model input of prompt ``text`` under ``prompt_format`` (``chat``, ``plain`` or ``auto``, resolved
    with :func:`resolve_prompt_format`); ``images``: image placeholders put before the text (a
    vision-language processor's template places their tokens)."""
    fmt = resolve_prompt_format(prompt_format, tokenizer, processor)
    if fmt == "plain" or is_templated(text, tokenizer, processor):
        return text
    owner = _owner(tokenizer, processor)
    return _render(owner, text, images, parts=owner is processor)

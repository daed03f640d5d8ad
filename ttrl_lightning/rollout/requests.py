"""What a command asks an engine to sample, and the one place a question becomes it.

A :class:`SamplingRequest` is a frozen record: the prompt text, the image paths it shows (in the order of the
prompt's image placeholders), its view (Self-Harmony's ``original`` / ``reframed``) and its question id.
Images travel as a named field, as verl's ``multi_modal_data`` does, never inside a string, so no string
operation can drop them.

:class:`PromptRenderer` (``tokenizer``, ``processor``, ``prompt_format``) holds the package's prompt rule
(:mod:`ttrl_lightning.prompt_format`) for every command, ``ttrl fit`` (GRPO's rollouts and validation, TTRL's
votes), ``ttrl eval`` and ``ttrl generate``:

* :meth:`PromptRenderer.check` refuses, before anything is sampled, every request this model and engine cannot
  sample, each refusal written once here: an image for a text-only model (no processor), an image for an engine
  that does not take images, an image under ``prompt_format: plain`` (only the chat template places the image
  tokens), an image for a model without a chat template, and (``uniform_images``: a pool's visual signals
  are for every record or for none; VisConf scores every vote by its visual engagement) a mix of requests with
  and without images;
* :meth:`PromptRenderer.render` gives the templated requests: ``chat`` puts the text in one user message of the
  chat template (a processor's: images first, then the text, as Qwen2-VL's examples do) with the generation
  prompt; ``plain`` keeps it as written; a text that already holds the template is not wrapped again;
* :meth:`PromptRenderer.fused` puts an instruction around a request's text inside the user turn of a templated
  prompt (``prompt_format.with_user_text``), never before its system turn: Self-Harmony's fused
  Reframe-and-Solve prompt (sec. 3).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ttrl_lightning.data.pool_schema import VIEWS
from ttrl_lightning.errors import UserError
from ttrl_lightning.prompt_format import chat_template, format_prompt, resolve_prompt_format, with_user_text

__all__ = ["SamplingRequest", "as_requests", "PromptRenderer", "question_where", "refuse_images_without_processor"]


@dataclass(frozen=True)
class SamplingRequest:
    """One prompt an engine samples: ``text`` (templated once :meth:`PromptRenderer.render` has run), ``images``
    (paths, verified when the questions were read, ``data.questions``), ``view`` and ``question_id``."""

    text: str
    images: tuple[str, ...] = ()
    view: str = VIEWS[0]
    question_id: str | None = None

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise TypeError(f"SamplingRequest.text must be a str, got {type(self.text).__name__}")
        object.__setattr__(self, "images", tuple(self.images or ()))

    def with_text(self, text: str) -> "SamplingRequest":
        """The same request (images, view, id) with another text."""
        return replace(self, text=text)


def as_requests(prompts: Sequence) -> list[SamplingRequest]:
    """``prompts`` as requests: a :class:`SamplingRequest` as it is, a plain ``str`` as a request without images
    (a string carries no images, so nothing is dropped)."""
    out = []
    for p in prompts:
        if isinstance(p, SamplingRequest):
            out.append(p)
        elif type(p) is str:  # a str subclass may carry attributes that a request would drop
            out.append(SamplingRequest(p))
        else:
            raise TypeError(f"an engine samples SamplingRequests or str prompts, got {type(p).__name__}")
    return out


def question_where(source: str, index: int, question_id=None) -> str:
    """``"<source>, question <index + 1> (id=...)"``: the question a refusal names."""
    qid = f" (id={str(question_id)!r})" if question_id is not None else ""
    return f"{source}, question {index + 1}{qid}"


def refuse_images_without_processor(processor, where: str = "a question", model: str = "the model") -> None:
    """The one refusal of an image that reaches a text-only model (no processor), wherever it is found."""
    if processor is None:
        raise UserError(f"{where}: has an image, but {model} is a text-only model (no vision config, no "
                        "processor); give a vision-language checkpoint or drop the image")


class PromptRenderer:
    """The prompt rule of one checkpoint (module docstring); ``prompt_format: chat`` for a model without a chat
    template is refused when it is built.

    tokenizer: the checkpoint's tokenizer; processor: its processor for a vision-language model (None for a
    text-only model); prompt_format: one of :data:`~ttrl_lightning.prompt_format.PROMPT_FORMATS`; model: its
    name and source: where the requests come from (a question file, a module), both named in refusals."""

    def __init__(self, tokenizer, processor=None, prompt_format: str = "auto", model: str = "the model",
                 source: str = "the questions"):
        self.tokenizer = tokenizer
        self.processor = processor
        self.model = model
        self.source = source
        self.has_template = chat_template(tokenizer, processor) is not None
        #: ``chat`` or ``plain`` (``prompt_format.resolve_prompt_format``: ``chat`` without a template is refused)
        self.format = resolve_prompt_format(prompt_format, tokenizer, processor)

    def where(self, index: int, request: SamplingRequest) -> str:
        """``"<source>, question <index + 1> (id=...)"``: the request a refusal names."""
        return question_where(self.source, index, request.question_id)

    def check(self, requests: Sequence[SamplingRequest], engine=None, uniform_images: str | None = None) -> None:
        """Refuse, before anything is sampled, every request this model (and ``engine``, when given) cannot
        sample (module docstring): one :class:`UserError` naming the first such request. ``uniform_images``: why
        the requests must all show images or none (said in the refusal), None when they may mix."""
        requests = as_requests(requests)
        for i, r in enumerate(requests):
            where = self.where(i, r)
            if r.images:
                refuse_images_without_processor(self.processor, where, self.model)
                if engine is not None and not getattr(engine, "takes_images", False):
                    raise UserError(f"{where}: has an image, but the rollout engine {type(engine).__name__} does "
                                    "not sample images; use engine hf")
            if r.images and not self.has_template:
                raise UserError(f"{where}: has an image, which needs the chat template to place its image tokens, "
                                f"but {self.model} has no chat template; use a checkpoint with a chat template")
            if r.images and self.format == "plain":
                raise UserError(f"{where}: has an image, which needs the chat template to place its image tokens, "
                                "but prompt_format is plain")
        with_images = [bool(r.images) for r in requests]
        if uniform_images and any(with_images) and not all(with_images):
            a, b = with_images.index(True), with_images.index(False)
            raise UserError(f"{self.where(a, requests[a])} has an image and {self.where(b, requests[b])} has none; "
                            f"{uniform_images}, so give every question an image or none")

    def render(self, requests: Sequence) -> list[SamplingRequest]:
        """The requests as the model reads them (module docstring): the text templated by ``prompt_format``
        (a request with images by the processor's chat template, one image placeholder per image), the images,
        view and id kept."""
        return [r.with_text(format_prompt(r.text, "chat" if r.images else self.format, self.tokenizer,
                                          self.processor, images=len(r.images)))
                for r in as_requests(requests)]

    def fused(self, request: SamplingRequest, template: str, view: str = VIEWS[1]) -> SamplingRequest:
        """``request`` with its text put in ``template`` (``{prompt}``), inside the user turn when the text
        already holds the chat template (``prompt_format.with_user_text``); ``plain`` fuses the text as written.
        The fused request is of ``view``."""
        if self.format == "plain":
            text = template.format(prompt=request.text)
        else:
            text = with_user_text(request.text, lambda t: template.format(prompt=t), self.tokenizer, self.processor)
        return replace(request, text=text, view=view)

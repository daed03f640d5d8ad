"""The model inputs of one view of a question: its prompt text (through the checkpoint's chat template, or
plain) and its images (through the checkpoint's processor).

Views (Self-Harmony): ``original`` asks the question as written; ``reframed`` asks the row's
``reframed_prompt`` when it has one, else the question behind :data:`FUSED_REFRAME_INSTRUCTION`, the
fused Reframe-and-Solve prompt (one generation restates the question, then solves the restatement).

Prompt formats (``--prompt-format``; the package's one prompt rule, ``rollout.requests.PromptRenderer``, as
``ttrl fit`` and ``ttrl eval`` apply it): ``chat`` applies the tokenizer's / processor's chat template to one
user message (images first, then the text, as Qwen2-VL's examples do) with the generation prompt; ``plain``
tokenizes the prompt as it is; ``auto`` is ``chat`` when the checkpoint has a chat template, else ``plain``.
A prompt that already holds the template is not wrapped again.
A question with images needs ``chat`` (the template places the image tokens); ``chat`` for a model without a
chat template, an image for a text-only model or an engine without images, and a mix of questions with and
without images (a pool has visual signals for every record or for none) are
:class:`~ttrl_lightning.errors.UserError` s (``PromptRenderer.check``) naming the question.
"""
from __future__ import annotations

from ..data.pool import VIEWS
from ..prompt_format import PROMPT_FORMATS
from ..rollout.image_sampling import prompt_inputs
from ..rollout.requests import PromptRenderer, SamplingRequest

__all__ = ["FUSED_REFRAME_INSTRUCTION", "PROMPT_FORMATS", "PromptBuilder", "view_prompt"]

#: Self-Harmony's fused Reframe-and-Solve instruction, put before the question of the reframed view when the
#: row has no ``reframed_prompt``
FUSED_REFRAME_INSTRUCTION = ("First restate the question below in your own words without changing its "
                             "meaning, then solve the restated question.\n\n")
#: the fused prompt of a question: the instruction, then the question (``PromptRenderer.fused``)
FUSED_REFRAME_TEMPLATE = FUSED_REFRAME_INSTRUCTION + "{prompt}"


def view_prompt(question: dict, view: str) -> str:
    """The prompt of ``view`` (module docstring)."""
    if view == VIEWS[0]:
        return question["prompt"]
    if view != VIEWS[1]:
        raise ValueError(f"unknown view {view!r}; views are {VIEWS}")
    return question["reframed_prompt"] or FUSED_REFRAME_INSTRUCTION + question["prompt"]


class PromptBuilder:
    """Model inputs of ``(question, view)`` for one checkpoint, by the package's prompt rule
    (:class:`~ttrl_lightning.rollout.requests.PromptRenderer`).

    tokenizer: the checkpoint's tokenizer; processor: its processor for a vision-language model (None for
    a text-only model); prompt_format: one of :data:`PROMPT_FORMATS`; source: the question file (named in
    errors); model: the checkpoint's name (named in errors)."""

    def __init__(self, tokenizer, processor=None, prompt_format: str = "auto", source: str = "the questions",
                 model: str = "the model"):
        self.renderer = PromptRenderer(tokenizer, processor, prompt_format, model=model, source=source)
        self.tokenizer = tokenizer
        self.processor = processor
        self.format = self.renderer.format

    def check(self, questions: list[dict], engine=None) -> None:
        """Refuse, before anything is sampled, every question this checkpoint (and ``engine``, when given)
        cannot be prompted with (``PromptRenderer.check``; a pool has visual signals for every record or for
        none)."""
        self.renderer.check([self._request(q) for q in questions], engine,
                            uniform_images="a pool has visual signals for every record or for none")

    @staticmethod
    def _request(question: dict, view: str = VIEWS[0]) -> SamplingRequest:
        qid = question.get("id")
        return SamplingRequest(question["prompt"], tuple(question.get("images") or ()), view,
                               None if qid is None else str(qid))

    def request(self, question: dict, view: str) -> SamplingRequest:
        """The request of ``view`` as the model reads it: the question, or its ``reframed_prompt``, or the
        question in :data:`FUSED_REFRAME_INSTRUCTION` (inside the user turn of a templated prompt,
        ``PromptRenderer.fused``), then the prompt rule (``PromptRenderer.render``)."""
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; views are {VIEWS}")
        request = self._request(question, view)
        if view == VIEWS[1]:
            request = request.with_text(question["reframed_prompt"]) if question["reframed_prompt"] else \
                self.renderer.fused(request, FUSED_REFRAME_TEMPLATE)
        return self.renderer.render([request])[0]

    def text(self, question: dict, view: str) -> str:
        """The prompt text of ``view`` (:meth:`request`)."""
        return self.request(question, view).text

    def inputs(self, question: dict, view: str) -> dict:
        """``{input_ids [1, T0], attention_mask [1, T0], ...}``: and ``pixel_values``, ``image_grid_thw``
        (and ``mm_token_type_ids`` when the processor gives them) for a question with images
        (``rollout.image_sampling.prompt_inputs``, what the HF engine samples from)."""
        return prompt_inputs(self.tokenizer, self.processor, self.request(question, view))

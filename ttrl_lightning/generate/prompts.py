"""The model inputs of one view of a question: its prompt text (through the checkpoint's chat template, or
plain) and its images (through the checkpoint's processor).

Views (Self-Harmony): ``original`` asks the question as written; ``reframed`` asks the row's
``reframed_prompt`` when it has one, else the question behind :data:`FUSED_REFRAME_INSTRUCTION`, the
fused Reframe-and-Solve prompt (one generation restates the question, then solves the restatement).

Prompt formats (``--prompt-format``; the package's one prompt rule, :mod:`ttrl_lightning.prompt_format`, as
``ttrl fit`` and ``ttrl eval`` apply it): ``chat`` applies the tokenizer's / processor's chat template to one
user message (images first, then the text, as Qwen2-VL's examples do) with the generation prompt; ``plain``
tokenizes the prompt as it is; ``auto`` is ``chat`` when the checkpoint has a chat template, else ``plain``.
A prompt that already holds the template is not wrapped again.
A question with images needs ``chat`` (the template places the image tokens); a model without a chat
template for a chat prompt, an image for a text-only model, and (for a vision-language model) a mix of
questions with and without images (a pool has visual signals for every record or for none) are
:class:`~ttrl_lightning.errors.UserError` naming the question.
"""
from __future__ import annotations

from ..data.pool import VIEWS
from ..errors import UserError
from ..prompt_format import PROMPT_FORMATS, chat_template, format_prompt, with_user_text
from ..rollout.image_sampling import image_inputs

__all__ = ["FUSED_REFRAME_INSTRUCTION", "PROMPT_FORMATS", "PromptBuilder", "view_prompt"]

#: Self-Harmony's fused Reframe-and-Solve instruction, put before the question of the reframed view when the
#: row has no ``reframed_prompt``
FUSED_REFRAME_INSTRUCTION = ("First restate the question below in your own words without changing its "
                             "meaning, then solve the restated question.\n\n")


def view_prompt(question: dict, view: str) -> str:
    """The prompt of ``view`` (module docstring)."""
    if view == VIEWS[0]:
        return question["prompt"]
    if view != VIEWS[1]:
        raise ValueError(f"unknown view {view!r}; views are {VIEWS}")
    return question["reframed_prompt"] or FUSED_REFRAME_INSTRUCTION + question["prompt"]


class PromptBuilder:
    """Model inputs of ``(question, view)`` for one checkpoint.

    tokenizer: the checkpoint's tokenizer; processor: its processor for a vision-language model (None for
    a text-only model); prompt_format: one of :data:`PROMPT_FORMATS`; source: the question file (named in
    errors)."""

    def __init__(self, tokenizer, processor=None, prompt_format: str = "auto", source: str = "the questions"):
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
        self.tokenizer = tokenizer
        self.processor = processor
        self.source = source
        self.has_template = chat_template(tokenizer, processor) is not None
        self.format = ("chat" if self.has_template else "plain") if prompt_format == "auto" else prompt_format

    def _where(self, index: int, question: dict) -> str:
        return f"{self.source}, question {index + 1} (id={question['id']!r})"

    def check(self, questions: list[dict]) -> None:
        """Refuse, before anything is sampled, every question this checkpoint cannot be prompted with."""
        with_images = [bool(q["images"]) for q in questions]
        for i, q in enumerate(questions):
            where = self._where(i, q)
            if q["images"] and self.processor is None:
                raise UserError(f"{where}: has an image, but the model is text-only (no vision config, no "
                                "processor); give a vision-language checkpoint or drop the image")
            if (q["images"] or self.format == "chat") and not self.has_template:
                why = "its image needs the chat template to place the image tokens" if q["images"] else \
                    "--prompt-format chat asks for one"
                raise UserError(f"{where}: a chat prompt, but the model has no chat template ({why}); use a "
                                "checkpoint with a chat template" + ("" if q["images"] else
                                                                     " or --prompt-format plain"))
            if q["images"] and self.format == "plain":
                raise UserError(f"{where}: has an image, which needs a chat prompt, but --prompt-format is "
                                "plain")
        if self.processor is not None and any(with_images) and not all(with_images):
            i = with_images.index(not with_images[0])
            first = self._where(0, questions[0])
            raise UserError(f"{self._where(i, questions[i])}: {'has' if with_images[i] else 'has no'} image "
                            f"but {first} {'has' if with_images[0] else 'has none'}; a pool has visual "
                            "signals for every record or for none, so give every question an image or none")

    def text(self, question: dict, view: str) -> str:
        """The prompt text of ``view`` after the chat template (``chat``) or as written (``plain``): the
        package's one prompt rule (``prompt_format.format_prompt``), which never wraps a prompt that already
        holds the template. The reframed view's instruction goes inside the user turn of a templated prompt
        (``prompt_format.with_user_text``), not before its system turn."""
        if view == VIEWS[1] and not question["reframed_prompt"] and self.format != "plain":
            prompt = with_user_text(question["prompt"], lambda text: FUSED_REFRAME_INSTRUCTION + text,
                                    self.tokenizer, self.processor)
        else:
            prompt = view_prompt(question, view)
        if self.format == "plain":
            return prompt
        images = len(question["images"]) if self.processor is not None else 0
        return format_prompt(prompt, "chat", self.tokenizer, self.processor, images=images)

    def inputs(self, question: dict, view: str) -> dict:
        """``{input_ids [1, T0], attention_mask [1, T0], ...}``: and ``pixel_values``, ``image_grid_thw``
        (and ``mm_token_type_ids`` when the processor gives them) for a question with images."""
        text = self.text(question, view)
        if self.processor is None:
            enc = self.tokenizer([text], return_tensors="pt", add_special_tokens=False)
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        return image_inputs(self.processor, text, question["images"])

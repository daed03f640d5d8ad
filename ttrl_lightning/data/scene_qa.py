"""Direct-answer SFT on generated scene questions: the start of a vision-language model that then runs test-time
RL on other scene questions (README "Vision-language TTRL").

A trace is the question as test-time RL and ``ttrl eval`` show it to a vision-language model -- the processor's
chat template with the image placeholder before the question text (``prompt_format.format_prompt``), the image
as vision tokens -- followed by the answer in the question file's format (``The answer is red.``) and the end
of sequence. Only the answer carries loss. The questions are drawn from the scene stream of ``seed``
(``data.scenes.scene_source``) and skip every question of the ``exclude`` question files (same prompt and
pixels, ``data.splits``), so the SFT never sees a question that the TTRL runs train or are scored on.
"""
from __future__ import annotations

from typing import Any, Sequence

from ttrl_lightning.data.datamodules import SFTDataModule, ProcessorFromModule, encode_trace
from ttrl_lightning.errors import UserError
from ttrl_lightning.data.tasks import Segment
from ttrl_lightning.models import IMAGE_PLACEHOLDER
from ttrl_lightning.prompt_format import format_prompt

__all__ = ["scene_answer_trace", "scene_qa_splits", "SceneQADataModule", "ANSWER_TEMPLATE", "ANSWER_FORMAT"]

#: the answer as a scene question file asks for it (``generate.scene_questions.ANSWER_FORMAT``)
ANSWER_TEMPLATE = "The answer is {}."
#: how a scene question asks for its answer, appended to the question (``generate.scene_questions`` writes it)
ANSWER_FORMAT = " Finish with 'The answer is X.'"


def scene_answer_trace(question: str, image, answer: str, tokenizer, processor, eos: str) -> list[Segment]:
    """The segments of one direct-answer trace (module docstring): prompt, image, prompt, answer."""
    text = format_prompt(question, "chat", tokenizer, processor, images=1)
    before, sep, after = text.partition(IMAGE_PLACEHOLDER)
    if not sep:
        raise ValueError(f"the chat template of {type(processor).__name__} placed no image placeholder")
    return [Segment(before, "prompt"), Segment(IMAGE_PLACEHOLDER, "image", image=image), Segment(after, "prompt"),
            Segment(ANSWER_TEMPLATE.format(answer) + eos, "text")]


def scene_qa_splits(seed: int, sizes: dict[str, int], kinds: Sequence[str],
                    exclude: Sequence[str] = ()) -> dict[str, list]:
    """Named splits of distinct scene questions of ``seed`` (``data.splits``), none of them a question of the
    question files ``exclude``; each split a list of ``{"index", "task": SceneTask, "prompt", "images"}``, the
    prompt worded as a question file words it (the question and :data:`ANSWER_FORMAT`)."""
    from ttrl_lightning.data.questions import read_questions
    from ttrl_lightning.data.scenes import scene_source
    from ttrl_lightning.data.splits import QuestionSource, SplitSpec, draw_splits, keys_of

    scenes = scene_source(seed, list(kinds))
    # worded as a question file words them, so that the files' questions are excluded by what they say
    source = QuestionSource(scenes.name, lambda m: [dict(it, prompt=it["prompt"] + ANSWER_FORMAT)
                                                    for it in scenes.draw(m)], identity=scenes.identity)
    taken = set().union(*(keys_of(read_questions(p)) for p in exclude))
    return draw_splits([SplitSpec(name, n, source) for name, n in sizes.items()], exclude=taken)


class SceneQADataModule(ProcessorFromModule, SFTDataModule):
    """SFT traces that answer generated scene questions directly (module docstring): ``n_train`` and ``n_val``
    distinct tasks of ``kinds`` from ``seed``, none in the ``exclude`` question files. ``processor``: the
    vision-language model's; None: the trained module's (``models.load_processor`` of its policy)."""

    def __init__(self, kinds: Sequence[str] = ("colour", "shape"), n_train: int = 512, n_val: int = 32,
                 exclude: Sequence[str] = (), batch_size: int = 16, max_length: int | None = 256, seed: int = 0,
                 num_workers: int = 0, tokenizer: Any = None, processor: Any = None):
        super().__init__(task="scene_qa", n_train=n_train, n_val=n_val, batch_size=batch_size,
                         max_length=max_length, seed=seed, num_workers=num_workers, tokenizer=tokenizer)
        self.kinds = list(kinds)
        self.exclude = list(exclude)
        self.processor = processor

    def setup(self, stage: str | None = None) -> None:
        tok = self._get_tokenizer()
        proc = self._get_processor()
        if proc is None:
            raise UserError(f"{type(self).__name__}: the trained model has no processor; scene questions need a "
                            "vision-language model")
        h = self.hparams
        splits = scene_qa_splits(h.seed, {"train": h.n_train, "validation": h.n_val}, self.kinds, self.exclude)

        def encode(item):
            task = item["task"]
            return encode_trace(tok, scene_answer_trace(item["prompt"], task.image, task.answer, tok, proc,
                                                        tok.eos_token), proc)

        self._train = [encode(t) for t in splits["train"]]
        self._val = [encode(t) for t in splits["validation"]]
        self._pad = tok.pad_token_id

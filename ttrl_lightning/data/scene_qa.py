"""Direct-answer SFT on generated scene questions: the start of a vision-language model that then runs test-time
RL on other scene questions (README "Vision-language TTRL").

A trace is the question as test-time RL and ``ttrl eval`` show it to a vision-language model -- the processor's
chat template with the image placeholder before the question text (``prompt_format.format_prompt``), the image
as vision tokens -- followed by the answer in the question file's format (``The answer is red.``) and the end
of sequence. Only the answer carries loss. The questions are drawn from the scene stream of ``seed``
(``data.scenes.scene_source``) and skip every question of the ``exclude`` question files (same prompt and
pixels, ``data.splits``), so the SFT never sees a question that the TTRL runs train or are scored on.

``label_noise`` (:func:`noisy_answers`) gives a share of the training traces a wrong answer, so the model learns
to put about ``1 - label_noise`` of its probability on the right answer and spreads the rest: a model whose
votes disagree while their majority is right, the regime test-time RL starts from (TTRL sec. 3: maj@k above
avg@k).
"""
from __future__ import annotations

from typing import Any, Sequence

from ttrl_lightning.data.datamodules import SFTDataModule, ProcessorFromModule, encode_trace
from ttrl_lightning.errors import Bounds, UserError, check_bounds
from ttrl_lightning.data.tasks import Segment
from ttrl_lightning.models import IMAGE_PLACEHOLDER
from ttrl_lightning.prompt_format import format_prompt

__all__ = ["scene_answer_trace", "scene_qa_splits", "noisy_answers", "SceneQADataModule", "ANSWER_TEMPLATE",
           "ANSWER_FORMAT"]

#: the answer as a scene question file asks for it (``generate.scene_questions.ANSWER_FORMAT``)
ANSWER_TEMPLATE = "The answer is {}."
#: the range of ``label_noise``: [0, 1)
LABEL_NOISE_BOUNDS = Bounds(low=0, high=1, high_open=True)
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


def noisy_answers(tasks: Sequence, rate: float, seed: int) -> list[str]:
    """The answers the traces of ``tasks`` are trained on: each task's own answer, except that a share ``rate``
    of them, drawn by ``random.Random(derive_seed(seed, "label_noise"))``, get another answer that a task of
    the same kind has in ``tasks`` (uniformly among those; a kind with one answer keeps it)."""
    import random

    from ttrl_lightning.seeding import derive_seed

    check_bounds({"label_noise": rate}, {"label_noise": LABEL_NOISE_BOUNDS}, "")
    rng = random.Random(derive_seed(seed, "label_noise"))
    options: dict[str, list[str]] = {}
    for t in tasks:
        if t.answer not in options.setdefault(t.kind, []):
            options[t.kind].append(t.answer)
    out = []
    for t in tasks:
        others = sorted(a for a in options[t.kind] if a != t.answer)
        flip = rng.random() < rate  # drawn for every task, so one task's draw does not move the others'
        out.append(rng.choice(others) if flip and others else t.answer)
    return out


class SceneQADataModule(ProcessorFromModule, SFTDataModule):
    """SFT traces that answer generated scene questions directly (module docstring): ``n_train`` and ``n_val``
    distinct tasks of ``kinds`` from ``seed``, none in the ``exclude`` question files; ``label_noise``: the share
    of training traces given a wrong answer (:func:`noisy_answers`; validation traces keep theirs). ``processor``:
    the vision-language model's; None: the trained module's (``models.load_processor`` of its policy)."""

    def __init__(self, kinds: Sequence[str] = ("colour", "shape"), n_train: int = 512, n_val: int = 32,
                 exclude: Sequence[str] = (), label_noise: float = 0.0, batch_size: int = 16,
                 max_length: int | None = 256, seed: int = 0, num_workers: int = 0, tokenizer: Any = None,
                 processor: Any = None):
        super().__init__(task="scene_qa", n_train=n_train, n_val=n_val, batch_size=batch_size,
                         max_length=max_length, seed=seed, num_workers=num_workers, tokenizer=tokenizer)
        check_bounds({"label_noise": label_noise}, {"label_noise": LABEL_NOISE_BOUNDS},
                     f"{type(self).__name__} argument ")
        self.kinds = list(kinds)
        self.exclude = list(exclude)
        self.label_noise = float(label_noise)
        self.processor = processor

    def setup(self, stage: str | None = None) -> None:
        tok = self._get_tokenizer()
        proc = self._get_processor()
        if proc is None:
            raise UserError(f"{type(self).__name__}: the trained model has no processor; scene questions need a "
                            "vision-language model")
        h = self.hparams
        splits = scene_qa_splits(h.seed, {"train": h.n_train, "validation": h.n_val}, self.kinds, self.exclude)

        def encode(item, answer):
            trace = scene_answer_trace(item["prompt"], item["task"].image, answer, tok, proc, tok.eos_token)
            return encode_trace(tok, trace, proc)

        train = splits["train"]
        answers = noisy_answers([t["task"] for t in train], self.label_noise, h.seed)
        self._train = [encode(t, a) for t, a in zip(train, answers)]
        self._val = [encode(t, t["task"].answer) for t in splits["validation"]]
        self._pad = tok.pad_token_id

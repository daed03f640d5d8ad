"""Chain-of-thought-action (CoTA) traces of the generated visual tasks, and the agent's prompt batches.

A CoTA trace (Pixelis 3.2.1) interleaves a thought, a tool call in the Qwen convention
``<tool_call>{json}</tool_call>`` and the tool's observation, step after step, then the answer. The
observations are produced by running the task's tool chain for real (``tools.ToolSession``), so the trace
shows exactly what the agent will be shown at rollout time (``tools.agent_format.observation_view``)::

    Segment("<|vision_start|><|image_pad|><|vision_end|>", "image", <the scene>)  # a VLM's view only
    Segment("Q: What colour is the triangle?\\n", "prompt")
    Segment("I look up the triangle with PROP.\\n", "text")                    # thought
    Segment('<tool_call>{"arguments":{"query":"triangle"},"name":"PROP"}</tool_call>', "action")
    Segment('<out>{"area":0.0131,...,"colour":"red",...}</out>', "observation")  # no loss
    Segment("Answer: red<eos>", "text")

``data.datamodules.encode_trace`` turns the segments into ``labels`` (observation tokens are
``IGNORE_INDEX``: no loss), ``action_mask`` (calls, weighted ``w_act`` by ``SFTModule``) and
``observation_span`` (feedback dropout).

The agent is a text model: it sees the question and the observations, the tools see the pixels. A step
whose arguments depend on the pixels must therefore be preceded by a step that reports them:
``text_chain`` rewrites ``read_small`` (ZOOM on the tiny word's box, then OCR on the view) as OCR on the
whole image, ZOOM on the box of the span it found, OCR on the view. Every other task's chain is used as is.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from ttrl_lightning.data.datamodules import PromptRowsDataModule, SFTDataModule, ProcessorFromModule, encode_trace
from ttrl_lightning.data.splits import MAX_GENERATOR_INDEX
from ttrl_lightning.data.scenes import SCENE_TASKS, SceneTask, make_tasks, scene_source, tool_kinds
from ttrl_lightning.data.tasks import Segment
from ttrl_lightning.errors import Bounds, UserError, check_bounds, checked_list
from ttrl_lightning.models import IMAGE_PLACEHOLDER
from ttrl_lightning.tools.agent_format import ANSWER_PREFIX, AgentPrompt, agent_prompt, format_agent_observation
from ttrl_lightning.tools.protocol import format_tool_call
from ttrl_lightning.tools.run import ToolSession

#: the thought written before each call: tool name -> template over the call's arguments
THOUGHTS: dict[str, str] = {
    "SEG": "I segment the {query} with SEG.",
    "PROP": "I look up the {query} with PROP.",
    "OCR": "I read the text with OCR.",
    "OCR_VIEW": "I read the zoomed view with OCR.",
    "ZOOM": "I zoom in on the text with ZOOM.",
    "TRK": "I track the {query} with TRK.",
    "TEMP": "I find when the {query} is visible with TEMP.",
}


def thought(name: str, args: dict[str, Any]) -> str:
    """The thought before calling ``name`` with ``args`` (one line)."""
    key = "OCR_VIEW" if name == "OCR" and "view" in args else name
    return THOUGHTS[key].format(query=args.get("query", ""))


def _zoom_box(artifact: dict[str, Any] | None) -> list[float] | None:
    spans = (artifact or {}).get("spans") or []
    return list(spans[0]["box"]) if spans else None


def text_chain(task: SceneTask) -> list[tuple[str, dict[str, Any]]] | None:
    """The task's tool chain as a text agent can write it: ``read_small`` becomes OCR, ZOOM on the found
    span (scale 2), OCR on the view; other chains unchanged. ZOOM's box is filled in by :func:`cota_trace`
    from the first observation (``None`` here)."""
    if task.kind == "read_small":
        return [("OCR", {}), ("ZOOM", {"box": None, "scale": 2}), ("OCR", {"view": 0})]
    return [(name, dict(args)) for name, args in task.chain]


def _direction_note(artifact: dict[str, Any] | None) -> str:
    tracks = (artifact or {}).get("tracks") or []
    if not tracks:
        return ""
    boxes = tracks[0]["boxes"]
    return f"It starts at x {boxes[0][0]} and ends at x {boxes[-1][0]}.\n"


def cota_trace(task: SceneTask, eos: str = "<eos>") -> list[Segment]:
    """The CoTA trace of ``task``: the task's image (an ``image`` segment: a clip's first frame), the
    prompt, then per step of :func:`text_chain` a thought (text), the call (action), its observation and,
    when the call handed back pixels (ZOOM's crop), that crop (``image``), then ``Answer: <answer>`` +
    ``eos`` (text). The direction task adds a line reading the first and last x of the track before
    answering. A text model's encoding leaves the image segments out; a VLM's shows them as vision tokens
    where ``rollout.agent.AgentEngine`` shows them at rollout time."""
    frames = list(task.frames) if task.frames is not None else None
    session = ToolSession(image=task.image, frames=frames)
    shown = task.image if task.image is not None else frames[0]
    segments = [Segment(IMAGE_PLACEHOLDER, "image", shown), Segment(agent_prompt(task.question), "prompt")]
    last = None
    for name, args in text_chain(task):
        if name == "ZOOM" and args.get("box") is None:
            box = _zoom_box(last.artifact if last is not None else None)
            if box is None:
                raise ValueError(f"{task.kind} task: OCR found no text to zoom on")
            args = {**args, "box": box}
        segments.append(Segment(thought(name, args) + "\n", "text"))
        segments.append(Segment(format_tool_call(name, args), "action"))
        last = session.run(name, args)
        segments.append(Segment(format_agent_observation(last), "observation"))
        if last.ok and last.view is not None:
            segments.append(Segment(IMAGE_PLACEHOLDER, "image", last.view))
    note = _direction_note(last.artifact if last is not None else None) if task.kind == "direction" else ""
    segments.append(Segment(f"{note}{ANSWER_PREFIX}{task.answer}{eos}", "text"))
    return segments


def scene_task_source(kind: str, seed: int, index: int) -> dict[str, Any]:
    """The ``source`` of a generated task: ``SCENE_TASKS[kind](seed, index)`` redraws it."""
    return {"kind": kind, "seed": int(seed), "index": int(index)}


def _kinds(kinds: Sequence[str] | None) -> tuple[str, ...]:
    out = tuple(kinds) if kinds else tool_kinds()
    for k in out:
        SCENE_TASKS[k]  # an unknown kind: KeyError listing the known ones
    return out


@functools.lru_cache(maxsize=16)
def _cota_traces(seed: int, n: int, kinds: tuple[str, ...], eos: str) -> tuple[tuple[Segment, ...], ...]:
    return tuple(tuple(cota_trace(t, eos)) for t in make_tasks(seed, n, list(kinds)))


def generate_cota_traces(seed: int, n: int, kinds: Sequence[str] | None = None,
                         eos: str = "<eos>") -> list[list[Segment]]:
    """``n`` CoTA traces of the tasks ``make_tasks(seed, n, kinds)`` (memoised per arguments: running the
    tools, OCR above all, is the slow part)."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    return [list(t) for t in _cota_traces(int(seed), int(n), _kinds(kinds), eos)]


def _agent_row(seed: int, index: int, task: SceneTask) -> dict[str, Any]:
    prompt = AgentPrompt(agent_prompt(task.question), image=task.image,
                         frames=list(task.frames) if task.frames is not None else None,
                         source=scene_task_source(task.kind, seed, index))
    return {"prompt": prompt, "gold": task.answer, "kind": task.kind, "id": f"{task.kind}-{seed}-{index}"}


def agent_prompts(seed: int, n: int, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``n`` agent rows ``{"prompt": AgentPrompt, "gold", "kind", "id"}`` of ``make_tasks(seed, n, kinds)``;
    the prompt carries the task's pixels and its ``source``."""
    kinds = _kinds(kinds)
    return [_agent_row(seed, i, task) for i, task in enumerate(make_tasks(seed, n, list(kinds)))]


def agent_prompt_splits(seed: int, sizes: dict[str, int], kinds: Sequence[str] | None = None
                        ) -> dict[str, list[dict[str, Any]]]:
    """Named splits of agent rows (``{name: size}``), cut in order from the distinct scene tasks of ``seed``
    (``data.splits``: no two splits share a question with the same pixels)."""
    from ttrl_lightning.data.splits import SplitSpec, draw_splits

    source = scene_source(seed, list(_kinds(kinds)))
    splits = draw_splits([SplitSpec(name, n, source) for name, n in sizes.items()])
    return {name: [_agent_row(seed, item["index"], item["task"]) for item in items]
            for name, items in splits.items()}


class CoTADataModule(ProcessorFromModule, SFTDataModule):
    """SFT on CoTA traces of the generated visual tasks: ``n_train`` traces from ``seed``, ``n_val`` from
    ``seed + 1`` (other scenes), task ``kinds`` (all by default); batches as ``SFTDataModule``'s.
    ``processor``: a vision-language model's (the traces then show the task image and the ZOOM crops as
    vision tokens and the batches carry their pixel inputs); None: the trained module's policy's
    (``PolicyModule.processor``: ``models.load_processor`` of its policy), which is None for a text model."""

    def __init__(self, kinds: Sequence[str] | None = None, n_train: int = 280, n_val: int = 28,
                 batch_size: int = 16, max_length: int | None = 1024, seed: int = 0, num_workers: int = 0,
                 tokenizer: Any = None, processor: Any = None):
        super().__init__(task="cota", n_train=n_train, n_val=n_val, batch_size=batch_size,
                         max_length=max_length, seed=seed, num_workers=num_workers, tokenizer=tokenizer)
        self.kinds = list(kinds) if kinds else None
        self.processor = processor

    def setup(self, stage: str | None = None) -> None:
        tok = self._get_tokenizer()
        proc = self._get_processor()
        h = self.hparams
        eos = tok.eos_token
        self._train = [encode_trace(tok, t, proc) for t in generate_cota_traces(h.seed, h.n_train, self.kinds, eos)]
        self._val = [encode_trace(tok, t, proc) for t in generate_cota_traces(h.seed + 1, h.n_val, self.kinds, eos)]
        self._pad = tok.pad_token_id


#: The sizes an :class:`AgentPromptDataModule` is built with, checked when it is built (a split of 0 training
#: tasks, or a negative one, was a traceback from the split drawing): at most
#: :data:`~ttrl_lightning.data.splits.MAX_GENERATOR_INDEX` tasks per split, the most a generated stream is
#: drawn
AGENT_PROMPT_BOUNDS = {
    "n_train": Bounds(1, MAX_GENERATOR_INDEX, integer=True),
    "n_val": Bounds(0, MAX_GENERATOR_INDEX, integer=True),
    "n_calibration": Bounds(0, MAX_GENERATOR_INDEX, integer=True),
    "batch_size": Bounds(1, MAX_GENERATOR_INDEX, integer=True),
    "seed": Bounds(0, integer=True),
}


class AgentPromptDataModule(PromptRowsDataModule):
    """Agent prompts of the generated visual tasks for CC-RFT and agent TTRL: batches ``{"prompt":
    [AgentPrompt], "gold": [str], "kind": [str], "id": [str]}``; train, validation (``n_val`` > 0) and
    (``n_calibration`` > 0) a labelled dev-cal split cut in that order from the distinct tasks of ``seed``
    (:func:`agent_prompt_splits`: they share no question with the same pixels; the calibration split changes
    neither of the others). ``calibration_questions()`` returns the dev-cal split, which
    ``TTRLModule(calibrate=True)`` reads to fit its labeler's calibration (pixel: temperature and conformal
    threshold) before training. The train loader is resumable mid-epoch; no shuffling (the tasks are drawn
    at random already)."""

    def __init__(self, kinds: Sequence[str] | None = None, n_train: int = 56, n_val: int = 14,
                 batch_size: int = 4, seed: int = 0, n_calibration: int = 0):
        check_bounds(dict(n_train=n_train, n_val=n_val, n_calibration=n_calibration, batch_size=batch_size,
                          seed=seed), AGENT_PROMPT_BOUNDS, f"{type(self).__name__} argument ")
        if kinds is not None:
            try:
                _kinds(checked_list(kinds, f"{type(self).__name__} argument kinds", str, "task name",
                                    error=UserError))
            except KeyError as e:
                raise UserError(f"{type(self).__name__} argument kinds: {e.args[0]}") from None
        super().__init__()
        self.save_hyperparameters()
        self.kinds = list(kinds) if kinds else None
        self._calibration: list[dict[str, Any]] | None = None

    def setup(self, stage: str | None = None) -> None:
        h = self.hparams
        sizes = {"train": h.n_train, "validation": h.n_val}
        if h.n_calibration:
            sizes["calibration"] = h.n_calibration
        splits = agent_prompt_splits(h.seed, {name: n for name, n in sizes.items() if n}, self.kinds)
        self._train, self._val = splits["train"], splits.get("validation", [])
        self._calibration = splits.get("calibration", [])

    def calibration_questions(self) -> list[dict[str, Any]]:
        """The labelled dev-cal rows (``[]`` when ``n_calibration`` is 0)."""
        if self._calibration is None:
            self.setup()
        return list(self._calibration)

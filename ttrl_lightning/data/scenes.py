"""Generated visual tasks with known truth: scenes (shapes, words, distractors) and clips of moving objects.

Everything is drawn with PIL (no anti-aliasing on shapes, PIL's default font for words, so nothing is
downloaded) from a ``random.Random`` seeded with ``seed * 1_000_003 + index`` (the rule of
``ttrl_lightning.seeding``): the same ``(seed, index)`` gives the same pixels and the same truth.

* :func:`make_scene` -> :class:`Scene`: objects (shape, colour, size, exact mask and box) on a plain
  background, non-overlapping, plus words (text and box), one of them optionally tiny;
* :func:`make_clip` -> :class:`Clip`: objects moving in their own horizontal lanes (bouncing off the sides,
  never overlapping), per-frame truth boxes by track id, and one object present only during a planted
  segment ``[start, end]`` of frames;
* :data:`SCENE_TASKS`: the one registry of image tasks (:class:`SceneTaskKind`: its maker, its family, whether
  it shows a clip); :func:`scene_kinds` lists them by family. The ``tool`` family: question makers, each solved by
  a known tool chain of one tool family, so a single-tool ablation removes exactly the tasks that need that
  tool (``direction`` and ``when`` show clips):

  =============  ======================================================  ==========================
  task           question                                                tool chain
  =============  ======================================================  ==========================
  ``count``      How many red objects are there?                         SEG
  ``colour``     What colour is the triangle?                            PROP
  ``shape``      What shape is the blue object?                          PROP
  ``read``       What word is written in the image?                      OCR
  ``read_small`` What is the small word?                                 ZOOM -> OCR on the view
  ``direction``  Does the red circle move left or right?                 TRK
  ``when``       In which frames is the green square visible?            TEMP
  =============  ======================================================  ==========================

* the ``glance`` family: questions answered at a glance, without tools, for direct-answer SFT and test-time RL
  of a small vision-language model (``ttrl demo --part vlm``): one large object alone on a small canvas
  (:func:`make_glance`), asked its colour (``object_colour``, in one of :data:`GLANCE_COLOUR_QUESTIONS`), and its
  shifted twin ``tinted_object_colour``, whose object is tinted toward another palette colour (:data:`TINT`).

A question file (``ttrl questions --task scenes``) holds the kinds with one image (:func:`question_file_kinds`).

Boxes are pixel boxes ``(x0, y0, x1, y1)`` with ``x1, y1`` exclusive (the tools' artifacts normalise them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ttrl_lightning.registry import Registry
from ttrl_lightning.tools.palette import BACKGROUND, COLOURS, SHAPES, TEXT_COLOUR, size_name

#: words drawn in scenes (upper case, distinct, easy to tell apart)
WORDS = (
    "APPLE",
    "RIVER",
    "TIGER",
    "CLOUD",
    "HOUSE",
    "LEMON",
    "PIANO",
    "ROBOT",
    "STONE",
    "WATER",
    "MONKEY",
    "GARDEN",
    "PLANET",
    "ORANGE",
    "YELLOW",
    "SILVER",
    "CASTLE",
    "DRAGON",
    "FOREST",
    "WINDOW",
)
#: object half-sizes in pixels per size class (the truth ``size`` is recomputed from the mask's area)
RADII = {"small": (7, 9), "medium": (13, 17), "large": (24, 30)}
#: font size of normal and tiny words
WORD_SIZE = (20, 26)
TINY_WORD_SIZE = 10
#: pixels kept free around every drawn item
MARGIN = 6


def scene_rng(seed: int, index: int) -> random.Random:
    """The generator of item ``index`` under ``seed`` (``seed * 1_000_003 + index``)."""
    return random.Random(int(seed) * 1_000_003 + int(index))


@dataclass(frozen=True)
class SceneObject:
    """A drawn shape: ``shape``, ``colour``, ``size`` (bucket of its area), pixel ``box`` and
    ``mask [H, W]``."""

    shape: str
    colour: str
    size: str
    box: tuple[int, int, int, int]
    mask: np.ndarray = field(repr=False)

    @property
    def label(self) -> str:
        return f"{self.colour} {self.shape}"


@dataclass(frozen=True)
class SceneWord:
    """A drawn word: ``text``, pixel ``box`` (its ink), font ``size``."""

    text: str
    box: tuple[int, int, int, int]
    size: int


@dataclass(frozen=True)
class Scene:
    """``image [H, W, 3]`` uint8 with its ``objects`` and ``words``."""

    image: np.ndarray = field(repr=False)
    objects: tuple[SceneObject, ...]
    words: tuple[SceneWord, ...]


@dataclass(frozen=True)
class Clip:
    """``frames`` (each ``[H, W, 3]`` uint8); ``tracks``: track id -> {frame: pixel box}; ``labels``: track id
    -> "colour shape"; ``segment``: the planted ``(track id, start, end)`` (inclusive frames)."""

    frames: tuple[np.ndarray, ...] = field(repr=False)
    tracks: dict[int, dict[int, tuple[int, int, int, int]]]
    labels: dict[int, str]
    segment: tuple[int, int, int]


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: int, cy: int, r: int, rgb: tuple[int, int, int]):
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=rgb)
    elif shape == "square":
        draw.rectangle((cx - r, cy - r, cx + r, cy + r), fill=rgb)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=rgb)
    else:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")


def _shape_mask(shape: str, cx: int, cy: int, r: int, width: int, height: int) -> np.ndarray:
    layer = Image.new("1", (width, height), 0)
    _draw_shape(ImageDraw.Draw(layer), shape, cx, cy, r, 1)
    return np.asarray(layer, dtype=bool)


def _box_of(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _free(box: tuple[int, int, int, int], taken: list[tuple[int, int, int, int]]) -> bool:
    return all(
        box[2] + MARGIN <= t[0]
        or t[2] + MARGIN <= box[0]
        or box[3] + MARGIN <= t[1]
        or t[3] + MARGIN <= box[1]
        for t in taken
    )


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def make_scene(
    seed: int,
    index: int,
    *,
    width: int = 224,
    height: int = 224,
    n_objects: tuple[int, int] = (2, 5),
    n_words: int = 1,
    tiny_word: bool = False,
    objects: list[tuple[str, str, str]] | None = None,
) -> Scene:
    """Draw scene ``index`` of ``seed``: ``n_objects`` (a range, inclusive) random shapes, or the given
    ``objects`` ``[(shape, colour, size class), ...]``, then ``n_words`` words (one tiny
    when ``tiny_word``)."""
    rng = scene_rng(seed, index)
    img = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(img)
    taken: list[tuple[int, int, int, int]] = []
    words: list[SceneWord] = []
    sizes = [rng.randint(*WORD_SIZE) for _ in range(n_words)] + ([TINY_WORD_SIZE] if tiny_word else [])
    for size in sizes:  # words first: they need the most room
        text = rng.choice([w for w in WORDS if w not in {x.text for x in words}])
        font = _font(size)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        for _ in range(200):
            x = rng.randint(MARGIN - left, width - MARGIN - right)
            y = rng.randint(MARGIN - top, height - MARGIN - bottom)
            box = (x + left, y + top, x + right, y + bottom)
            if _free(box, taken):
                break
        else:
            raise ValueError(f"scene {index}: no room for the word {text!r} in {width}x{height}")
        draw.text((x, y), text, fill=TEXT_COLOUR, font=font)
        taken.append(box)
        words.append(SceneWord(text, box, size))
    if objects is None:
        count = rng.randint(*n_objects)
        objects = [
            (rng.choice(sorted(SHAPES)), rng.choice(sorted(COLOURS)), rng.choice(sorted(RADII)))
            for _ in range(count)
        ]
        shrink = True  # random objects that find no room are drawn one size class smaller
    else:
        shrink = False
    drawn: list[SceneObject] = []
    classes = list(RADII)
    for shape, colour, size_class in objects:
        placed = False
        for cls in classes[: classes.index(size_class) + 1][::-1] if shrink else [size_class]:
            r = rng.randint(*RADII[cls])
            for _ in range(300):
                cx = rng.randint(r + MARGIN, width - r - MARGIN - 1)
                cy = rng.randint(r + MARGIN, height - r - MARGIN - 1)
                mask = _shape_mask(shape, cx, cy, r, width, height)
                box = _box_of(mask)
                if _free(box, taken):
                    placed = True
                    break
            if placed:
                break
        if not placed:
            raise ValueError(
                f"scene {index}: no room for a {size_class} {colour} {shape} in {width}x{height}"
            )
        _draw_shape(draw, shape, cx, cy, r, COLOURS[colour])
        taken.append(box)
        drawn.append(SceneObject(shape, colour, size_name(mask.sum() / (width * height)), box, mask))
    return Scene(np.asarray(img, dtype=np.uint8).copy(), tuple(drawn), tuple(words))


def make_clip(
    seed: int,
    index: int,
    *,
    n_frames: int = 24,
    width: int = 128,
    height: int = 128,
    n_objects: int = 3,
    radius: tuple[int, int] = (8, 12),
    min_segment: int = 5,
) -> Clip:
    """Draw clip ``index`` of ``seed``: ``n_objects`` distinct (colour, shape) objects, each in its own
    horizontal lane moving at a constant speed and bouncing off the sides; the last object is visible only
    during a planted segment of at least ``min_segment`` frames that is not the whole clip."""
    rng = scene_rng(seed, index)
    lane = height // n_objects
    if lane < 2 * radius[1] + 2:
        raise ValueError(f"{n_objects} lanes of {lane} px cannot hold objects of radius {radius[1]}")
    kinds = rng.sample([(s, c) for s in sorted(SHAPES) for c in sorted(COLOURS)], n_objects)
    movers = []
    for k, (shape, colour) in enumerate(kinds):
        r = rng.randint(*radius)
        cy = k * lane + lane // 2
        x = float(rng.randint(r + 1, width - r - 2))
        v = rng.choice([-1, 1]) * rng.uniform(2.0, 4.0)
        movers.append([shape, colour, r, cy, x, v])
    start = rng.randint(0, n_frames - min_segment - 1)
    end = rng.randint(start + min_segment - 1, n_frames - 2)
    frames, tracks = [], {k + 1: {} for k in range(n_objects)}
    for t in range(n_frames):
        img = Image.new("RGB", (width, height), BACKGROUND)
        draw = ImageDraw.Draw(img)
        for k, m in enumerate(movers):
            shape, colour, r, cy, x, v = m
            visible = k < n_objects - 1 or start <= t <= end
            if visible:
                cx = int(round(x))
                _draw_shape(draw, shape, cx, cy, r, COLOURS[colour])
                tracks[k + 1][t] = _box_of(_shape_mask(shape, cx, cy, r, width, height))
            x += v
            if x < r + 1 or x > width - r - 2:  # bounce
                v = -v
                x = min(max(x, r + 1), width - r - 2)
            m[4], m[5] = x, v
        frames.append(np.asarray(img, dtype=np.uint8).copy())
    labels = {k + 1: f"{c} {s}" for k, (s, c) in enumerate(kinds)}
    return Clip(tuple(frames), tracks, labels, (n_objects, start, end))


# --- tasks ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SceneTask:
    """A question with its ``answer``, the ``tool`` family it needs, the reference ``chain`` of tool calls
    ``[(name, args), ...]`` that solves it, the pixels (``image`` or ``frames``) and ``truth`` (what the
    decisive step should return: boxes, masks, text, segments) for fidelity scoring."""

    kind: str
    tool: str
    question: str
    answer: str
    chain: tuple[tuple[str, dict[str, Any]], ...]
    image: np.ndarray | None = field(default=None, repr=False)
    frames: tuple[np.ndarray, ...] | None = field(default=None, repr=False)
    truth: dict[str, Any] = field(default_factory=dict, repr=False)


#: the families of image tasks: ``tool`` (solved by a known tool chain), ``glance`` (answered without tools)
SCENE_FAMILIES = ("tool", "glance")


@dataclass(frozen=True)
class SceneTaskKind:
    """One kind of image task: ``make(seed, index) -> SceneTask`` (calling the kind calls it), its ``family``
    (:data:`SCENE_FAMILIES`) and ``clip``: its tasks show frames, not one image (no question file holds them)."""

    name: str
    make: Callable[[int, int], "SceneTask"]
    family: str = "tool"
    clip: bool = False

    def __call__(self, seed: int, index: int) -> "SceneTask":
        return self.make(seed, index)


#: task kind -> :class:`SceneTaskKind`: every image task, tool and glance
SCENE_TASKS: Registry[SceneTaskKind] = Registry("scene task")
_REGISTERED: list[str] = []  # the kinds in the order they were registered (the question files' cycling order)


def scene_task_kind(name: str, family: str = "tool", clip: bool = False):
    """Register the decorated maker as kind ``name`` of :data:`SCENE_TASKS`."""
    if family not in SCENE_FAMILIES:
        raise ValueError(f"family must be one of {SCENE_FAMILIES}, got {family!r}")

    def deco(fn: Callable[[int, int], "SceneTask"]):
        SCENE_TASKS.register(name, SceneTaskKind(name, fn, family, clip))
        _REGISTERED.append(name)
        return fn

    return deco


def scene_kinds(family: str | None = None, clip: bool | None = None) -> tuple[str, ...]:
    """The kinds of :data:`SCENE_TASKS` of ``family`` (None: every family) that show a clip or not (``clip``;
    None: both), in the order they were registered."""
    return tuple(k for k in _REGISTERED if (family is None or SCENE_TASKS[k].family == family)
                 and (clip is None or SCENE_TASKS[k].clip == clip))


def _norm_box(box: tuple[int, int, int, int], width: int, height: int) -> list[float]:
    return [
        round(box[0] / width, 2),
        round(box[1] / height, 2),
        round(box[2] / width, 2),
        round(box[3] / height, 2),
    ]


@scene_task_kind("count")
def count_task(seed: int, index: int) -> SceneTask:
    scene = make_scene(seed, index, n_objects=(3, 6))
    colour = scene_rng(seed, index + 7_919).choice(sorted({o.colour for o in scene.objects}))
    hits = [o for o in scene.objects if o.colour == colour]
    return SceneTask(
        "count",
        "SEG",
        f"How many {colour} objects are there?",
        str(len(hits)),
        (("SEG", {"query": f"{colour} objects"}),),
        image=scene.image,
        truth={"masks": [o.mask for o in hits], "boxes": [o.box for o in hits]},
    )


def _unique(scene: Scene, attr: str) -> list[SceneObject]:
    values = [getattr(o, attr) for o in scene.objects]
    return [o for o in scene.objects if values.count(getattr(o, attr)) == 1]


def _retry(make: Callable[[int], Scene], pick: Callable[[Scene], list[SceneObject]], index: int):
    for attempt in range(50):  # draw again (a new index stream) until the question is unambiguous
        scene = make(index * 64 + attempt)
        choices = pick(scene)
        if choices:
            return scene, choices
    raise ValueError(f"no unambiguous scene for item {index}")


def _property_task(kind: str, asked: str, named_by: str, question: str, seed: int, index: int) -> SceneTask:
    """A PROP question: the ``asked`` property (colour or shape) of the one object whose ``named_by``
    property is unique in the scene; ``question`` is formatted with that object's ``named_by`` value."""
    scene, choices = _retry(
        lambda i: make_scene(seed, i, n_objects=(2, 4)), lambda s: _unique(s, named_by), index
    )
    obj = choices[0]
    key = getattr(obj, named_by)
    return SceneTask(
        kind,
        "PROP",
        question.format(key),
        getattr(obj, asked),
        (("PROP", {"query": key}),),
        image=scene.image,
        truth={"colour": obj.colour, "shape": obj.shape, "size": obj.size, "box": obj.box},
    )


@scene_task_kind("colour")
def colour_task(seed: int, index: int) -> SceneTask:
    return _property_task("colour", "colour", "shape", "What colour is the {}?", seed, index)


@scene_task_kind("shape")
def shape_task(seed: int, index: int) -> SceneTask:
    return _property_task("shape", "shape", "colour", "What shape is the {} object?", seed, index)


@scene_task_kind("read")
def read_task(seed: int, index: int) -> SceneTask:
    scene = make_scene(seed, index, n_objects=(1, 3), n_words=1)
    word = scene.words[0]
    return SceneTask(
        "read",
        "OCR",
        "What word is written in the image?",
        word.text,
        (("OCR", {}),),
        image=scene.image,
        truth={"text": word.text, "box": word.box},
    )


@scene_task_kind("read_small")
def read_small_task(seed: int, index: int) -> SceneTask:
    scene = make_scene(seed, index, n_objects=(1, 3), n_words=0, tiny_word=True)
    word = scene.words[0]
    h, w = scene.image.shape[:2]
    return SceneTask(
        "read_small",
        "ZOOM",
        "What is the small word?",
        word.text,
        (("ZOOM", {"box": _norm_box(word.box, w, h), "scale": 2}), ("OCR", {"view": 0})),
        image=scene.image,
        truth={"text": word.text, "box": word.box},
    )


@scene_task_kind("direction", clip=True)
def direction_task(seed: int, index: int) -> SceneTask:
    for attempt in range(50):  # draw again until the object's first and last positions differ
        clip = make_clip(seed, index * 64 + attempt, n_frames=12)
        tid = scene_rng(seed, index * 64 + attempt + 7_919).choice(
            sorted(t for t in clip.tracks if t != clip.segment[0])
        )
        boxes = clip.tracks[tid]
        first, last = boxes[min(boxes)], boxes[max(boxes)]
        if last[0] != first[0]:
            break
    answer = "right" if last[0] > first[0] else "left"
    return SceneTask(
        "direction",
        "TRK",
        f"Between the first and the last frame, does the {clip.labels[tid]} end up further left or right?",
        answer,
        (("TRK", {"query": clip.labels[tid]}),),
        frames=clip.frames,
        truth={"tracks": {tid: boxes}},
    )


@scene_task_kind("when", clip=True)
def when_task(seed: int, index: int) -> SceneTask:
    clip = make_clip(seed, index)
    tid, start, end = clip.segment
    return SceneTask(
        "when",
        "TEMP",
        f"In which frames is the {clip.labels[tid]} visible?",
        f"{start}-{end}",
        (("TEMP", {"query": clip.labels[tid]}),),
        frames=clip.frames,
        truth={"segment": (start, end)},
    )


# --- glance tasks: one object, no tools -------------------------------------------------------------------

#: side of a glance scene's square canvas: the largest image the tiny vision-language processor encodes
#: unresized (``models`` tiny processor, ``max_pixels`` 112 * 112), i.e. 4 x 4 merged vision tokens
GLANCE_SIZE = 112
#: radius range of a glance scene's object, in pixels: it spans 43-79% of the canvas side
GLANCE_RADII = (24, 44)
#: range of the tint fraction ``f`` of ``tinted_object_colour``: the object's pixels are
#: ``(1 - f) * its colour + f * another palette colour``
TINT = (0.15, 0.40)

def _nearest_colour(rgb: np.ndarray) -> str:
    return min(COLOURS, key=lambda c: float(((rgb - np.asarray(COLOURS[c], dtype=float)) ** 2).sum()))


def make_glance(seed: int, index: int, tint: tuple[float, float] | None = None) -> Scene:
    """Glance scene ``index`` of ``seed``: one object of a random shape and palette colour, radius drawn from
    :data:`GLANCE_RADII`, alone on a :data:`GLANCE_SIZE` square canvas, no words.

    ``tint = (lo, hi)``: its pixels become ``(1 - f) * COLOURS[colour] + f * COLOURS[other]``, ``f ~ U(lo, hi)``,
    ``other`` another palette colour, redrawn until the tinted colour's nearest palette colour (Euclidean RGB)
    is still its own, so the object's ``colour`` stays the true answer."""
    rng = scene_rng(seed, index)
    shape, colour = rng.choice(sorted(SHAPES)), rng.choice(sorted(COLOURS))
    r = rng.randint(*GLANCE_RADII)
    cx = rng.randint(r + MARGIN, GLANCE_SIZE - r - MARGIN - 1)
    cy = rng.randint(r + MARGIN, GLANCE_SIZE - r - MARGIN - 1)
    rgb = np.asarray(COLOURS[colour], dtype=float)
    if tint is not None:
        lo, hi = tint
        if not 0 <= lo <= hi < 0.5:
            raise ValueError(f"tint must satisfy 0 <= lo <= hi < 0.5, got {tint}")
        for _ in range(100):
            other = rng.choice(sorted(c for c in COLOURS if c != colour))
            f = rng.uniform(lo, hi)
            mixed = (1 - f) * rgb + f * np.asarray(COLOURS[other], dtype=float)
            if _nearest_colour(mixed) == colour:
                rgb = mixed
                break
        else:
            raise ValueError(f"glance scene {index}: no tint of {colour} in {tint} stays nearest {colour}")
    img = Image.new("RGB", (GLANCE_SIZE, GLANCE_SIZE), BACKGROUND)
    fill = tuple(int(v) for v in np.rint(rgb))
    _draw_shape(ImageDraw.Draw(img), shape, cx, cy, r, fill)
    mask = _shape_mask(shape, cx, cy, r, GLANCE_SIZE, GLANCE_SIZE)
    obj = SceneObject(shape, colour, size_name(mask.sum() / GLANCE_SIZE**2), _box_of(mask), mask)
    return Scene(np.asarray(img, dtype=np.uint8).copy(), (obj,), ())


#: the wordings of a glance colour question, one drawn per item. Their lengths differ, so the answer starts at
#: another position from question to question: with one wording a small model can learn to spell each answer
#: letter from its position and the image instead of from the letters before it, and on an image between two
#: colours it then spells a mixture of both ("plrple"; measured on ``configs/sft/tiny_vlm.yaml``)
GLANCE_COLOUR_QUESTIONS = (
    "What colour is the object?",
    "What colour is it?",
    "Which colour does the object in the picture have?",
    "Name the colour of the shape.",
    "What is the colour of the one object in this image?",
)


def _glance_colour_task(kind: str, seed: int, index: int, tint: tuple[float, float] | None) -> SceneTask:
    scene = make_glance(seed, index, tint)
    obj = scene.objects[0]
    question = scene_rng(seed, index + 7_919).choice(GLANCE_COLOUR_QUESTIONS)
    return SceneTask(kind, "PROP", question, obj.colour, (("PROP", {"query": "object"}),),
                     image=scene.image, truth={"colour": obj.colour, "shape": obj.shape, "box": obj.box})


@scene_task_kind("object_colour", family="glance")
def object_colour_task(seed: int, index: int) -> SceneTask:
    return _glance_colour_task("object_colour", seed, index, None)


@scene_task_kind("tinted_object_colour", family="glance")
def tinted_object_colour_task(seed: int, index: int) -> SceneTask:
    return _glance_colour_task("tinted_object_colour", seed, index, TINT)


def question_file_kinds() -> tuple[str, ...]:
    """The kinds a question file holds: those that show one image, tool and glance, in registration order (the
    order a file cycles through)."""
    return scene_kinds(clip=False)


def tool_kinds() -> tuple[str, ...]:
    """The agent's default kinds: every ``tool`` kind (clips too), sorted by name."""
    return tuple(sorted(scene_kinds("tool")))


def make_tasks(seed: int, n: int, kinds: list[str] | None = None) -> list[SceneTask]:
    """``n`` tasks cycling through ``kinds`` (any of :data:`SCENE_TASKS`; by default :func:`tool_kinds`), item
    ``i`` drawn from ``(seed, i)``."""
    kinds = kinds or tool_kinds()
    return [SCENE_TASKS[kinds[i % len(kinds)]](seed, i) for i in range(n)]


def scene_source(seed: int, kinds: list[str] | None = None):
    """The scene tasks of ``seed`` as a question stream (:class:`.splits.QuestionSource`): item ``i`` is
    ``{"index": i, "task": SceneTask, "prompt": its question, "images": its image or frames}``, the task
    :func:`make_tasks` draws at ``i``. Splits cut from it are disjoint by question text and pixels
    (:func:`.splits.question_key`), so two scenes asked the same question are two questions."""
    from .splits import QuestionSource

    kinds = list(kinds or tool_kinds())
    makers = [SCENE_TASKS[k] for k in kinds]  # an unknown kind fails here, naming the known ones
    drawn: list[dict] = []

    def draw(n: int) -> list[dict]:
        for i in range(len(drawn), n):  # memoised: a longer draw renders only the new scenes
            task = makers[i % len(kinds)](seed, i)
            pixels = [task.image] if task.image is not None else list(task.frames or ())
            drawn.append({"index": i, "task": task, "prompt": task.question, "images": pixels})
        return drawn[:n]

    return QuestionSource(f"scenes {','.join(kinds)} (seed {seed})", draw, identity=(int(seed), tuple(kinds)))

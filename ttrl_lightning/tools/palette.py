"""The named colours and shapes the generated scenes use and the SEG / PROP backends name.

Shared by ``ttrl_lightning.data.scenes`` (which draws with these exact RGB values) and the colour / shape
segmenter, so a colour word in a question means the same pixels in both.
"""

from __future__ import annotations

#: colour name -> RGB drawn in scenes (pairwise distances > 90, far from the background and from black text)
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (240, 200, 30),
    "purple": (140, 60, 180),
    "orange": (245, 130, 30),
}

#: scene background and text colour
BACKGROUND = (245, 245, 245)
TEXT_COLOUR = (10, 10, 10)

#: shape names, with the share of its bounding box a filled shape covers (square 1, disc pi/4, triangle 1/2)
SHAPES: dict[str, float] = {"square": 1.0, "circle": 0.785, "triangle": 0.5}

#: size buckets by the share of the image an object covers: name -> upper bound (exclusive)
SIZES: dict[str, float] = {"small": 0.01, "medium": 0.04, "large": 1.01}

#: words of a query that name any object
ANY_OBJECT = frozenset({"object", "objects", "shape", "shapes", "thing", "things", "all", "item", "items"})


def parse_query(query: str) -> tuple[str | None, str | None, bool]:
    """``"red circles"`` -> ``("red", "circle", True)``: the colour and shape a query names and whether
    it named anything known (a query with only unknown words matches nothing)."""
    colour = shape = None
    known = False
    for raw in query.lower().replace(",", " ").split():
        word = raw.strip(".?!'\"")
        if word in ("grey", "gray"):
            word = "gray"
        singular = word[:-1] if word.endswith("s") and word[:-1] in SHAPES else word
        if word in COLOURS:
            colour, known = word, True
        elif singular in SHAPES:
            shape, known = singular, True
        elif word in ANY_OBJECT:
            known = True
    return colour, shape, known


def size_name(area_fraction: float) -> str:
    """The size bucket of an object covering ``area_fraction`` of the image (:data:`SIZES`)."""
    for name, bound in SIZES.items():
        if area_fraction < bound:
            return name
    return "large"

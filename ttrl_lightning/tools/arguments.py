"""Typed tool arguments: each tool declares :class:`Arg` specs and every call is checked against them.

Arguments arrive as a parsed JSON object (never evaluated text). :func:`check_arguments` returns the
converted values or raises :class:`~ttrl_lightning.tools.observation.ToolError` with a typed code:

* ``bad_arguments``: a missing required argument, an unknown name, a wrong type (``True`` is not a number);
* ``box_outside_image``: a box coordinate outside [0, 1] (boxes are ``[x0, y0, x1, y1]`` normalised);
* ``empty_crop``: a box with ``x1 <= x0`` or ``y1 <= y0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ttrl_lightning.registry import Registry
from ttrl_lightning.tools.observation import ToolError

#: the longest text argument accepted (queries are short object descriptions)
MAX_TEXT = 200


#: the largest magnitude of a number argument (beyond it an int no longer converts to a float exactly, and a
#: 309-digit one not at all)
MAX_MAGNITUDE = 2 ** 53


def _shown(value: Any) -> str:
    """``value`` for a message, short (a huge integer by its number of digits)."""
    if isinstance(value, int) and abs(value) >= 10 ** 40:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, int) and abs(value) > MAX_MAGNITUDE) or not math.isfinite(value):
        raise ToolError("bad_arguments", f"{name} must be a finite number, got {_shown(value)}")
    return float(value)


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_MAGNITUDE:
        raise ToolError("bad_arguments", f"{name} must be an integer of at most {MAX_MAGNITUDE} in magnitude, "
                        f"got {_shown(value)}")
    return int(value)


def _as_box(name: str, value: Any) -> list[float]:
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise ToolError("bad_arguments", f"{name} must be a list [x0, y0, x1, y1], got {value!r}")
    box = [_number(f"{name}[{i}]", v) for i, v in enumerate(value)]
    if any(v < 0.0 or v > 1.0 for v in box):
        raise ToolError("box_outside_image", f"{name} {box} has a coordinate outside [0, 1]")
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ToolError("empty_crop", f"{name} {box} has zero width or height (needs x0 < x1, y0 < y1)")
    return box


def _as_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError("bad_arguments", f"{name} must be a non-empty string, got {value!r}")
    if len(value) > MAX_TEXT:
        raise ToolError("bad_arguments", f"{name} is longer than {MAX_TEXT} characters")
    return value.strip()


def _as_range(name: str, value: Any) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ToolError(
            "bad_arguments", f"{name} must be a list [start, end] of frame indices, got {value!r}"
        )
    start, end = (_integer(f"{name}[{i}]", v) for i, v in enumerate(value))
    if start < 0 or end < start:
        raise ToolError("frame_range", f"{name} [{start}, {end}] needs 0 <= start <= end")
    return start, end


def _as_int(name: str, value: Any) -> int:
    return _integer(name, value)


def _as_float(name: str, value: Any) -> float:
    return _number(name, value)


#: argument kind -> checker ``(name, value) -> converted value``
ARG_KINDS: Registry[Callable[[str, Any], Any]] = Registry("tool argument kind")
ARG_KINDS.register("box", _as_box)
ARG_KINDS.register("text", _as_text)
ARG_KINDS.register("frame_range", _as_range)
ARG_KINDS.register("int", _as_int)
ARG_KINDS.register("float", _as_float)


@dataclass(frozen=True)
class Arg:
    """One argument of a tool: its ``name``, ``kind`` (a key of :data:`ARG_KINDS`), whether it is
    ``required``, its ``default`` when absent, an inclusive numeric range ``low``/``high`` and a ``doc``."""

    name: str
    kind: str
    required: bool = False
    default: Any = None
    low: float | None = None
    high: float | None = None
    doc: str = ""

    def __post_init__(self):
        ARG_KINDS[self.kind]  # an unknown kind is a programming error, raised at import


def check_arguments(specs: tuple[Arg, ...], args: Any) -> dict[str, Any]:
    """Validate ``args`` (a dict from parsed JSON) against ``specs``; absent optional ones get their
    default."""
    if not isinstance(args, dict):
        raise ToolError("bad_arguments", f"arguments must be a JSON object, got {type(args).__name__}")
    known = {s.name for s in specs}
    unknown = sorted(str(k) for k in args if k not in known)
    if unknown:
        raise ToolError(
            "bad_arguments", f"unknown argument(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in args or args[spec.name] is None:
            if spec.required:
                raise ToolError("bad_arguments", f"missing required argument {spec.name!r} ({spec.kind})")
            out[spec.name] = spec.default
            continue
        value = ARG_KINDS[spec.kind](spec.name, args[spec.name])
        if spec.low is not None and value < spec.low or spec.high is not None and value > spec.high:
            raise ToolError("bad_arguments", f"{spec.name}={value} outside [{spec.low}, {spec.high}]")
        out[spec.name] = value
    return out

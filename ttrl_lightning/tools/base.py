"""The tool interface and the ``TOOLS`` registry.

A :class:`Tool` has a ``name``, typed ``args`` (:class:`~ttrl_lightning.tools.arguments.Arg`), the input it
needs (an image or a clip) and ``run(args, context) -> artifact`` (a JSON-able dict, coordinates normalised
by :mod:`~ttrl_lightning.tools.serialise`); a bad call raises
:class:`~ttrl_lightning.tools.observation.ToolError`, which :func:`~ttrl_lightning.tools.run.run_tool` turns
into a typed error observation. Tools register themselves in :data:`TOOLS` by their Pixelis name (SEG, ZOOM,
TRK, OCR, TEMP, PROP); the aliases CROP and READ resolve through :data:`ALIASES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

from ttrl_lightning.registry import Registry
from ttrl_lightning.tools.arguments import Arg
from ttrl_lightning.tools.observation import ToolError

#: the setup.py extra that installs the tool backends
EXTRA = "tools"


def require(module: str, package: str):
    """Import ``module`` lazily; when absent raise an ``ImportError`` naming ``package`` and the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"this tool needs {package} (pip install 'ttrl_lightning[{EXTRA}]')") from err


def as_rgb(image: Any, what: str = "image") -> np.ndarray:
    """A PIL image or an ``[H, W, 3]`` uint8 array -> a C-contiguous ``[H, W, 3]`` uint8 array
    (read-only view)."""
    if hasattr(image, "convert") and hasattr(image, "size"):
        image = np.asarray(image.convert("RGB"))
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{what} must be a PIL image or an HxWx3 uint8 array; got {arr.dtype} {arr.shape}")
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class ToolContext:
    """The pixels a call may read: one ``image`` and / or the ``frames`` of a clip (``[H, W, 3]`` uint8), and
    the ``views`` earlier ZOOM calls of the same trajectory returned (``view: k`` reads the k-th)."""

    image: np.ndarray | None = None
    frames: tuple[np.ndarray, ...] | None = None
    views: tuple[np.ndarray, ...] = ()

    def with_view(self, view: np.ndarray) -> "ToolContext":
        """This context with ``view`` appended to :attr:`views`."""
        return ToolContext(self.image, self.frames, self.views + (as_rgb(view, "view"),))

    @classmethod
    def of(cls, image: Any = None, frames: Any = None) -> "ToolContext":
        img = None if image is None else as_rgb(image)
        clip = None if frames is None else tuple(as_rgb(f, f"frames[{i}]") for i, f in enumerate(frames))
        return cls(img, clip)

    def picture(self, frame: int | None, view: int | None = None) -> np.ndarray:
        """The image a single-image tool reads: ``views[view]`` or ``frames[frame]`` when given (not both),
        else the image (or frame 0 of a clip without an image)."""
        if view is not None:
            if frame is not None:
                raise ToolError("bad_arguments", "a call reads a frame or a view, not both")
            if not 0 <= view < len(self.views):
                raise ToolError("no_input", f"view {view} does not exist ({len(self.views)} views so far)")
            return self.views[view]
        if frame is not None:
            if not self.frames:
                raise ToolError("no_input", "the call names a frame but there is no clip")
            if not 0 <= frame < len(self.frames):
                raise ToolError("frame_range", f"frame {frame} is past the clip of {len(self.frames)} frames")
            return self.frames[frame]
        if self.image is not None:
            return self.image
        if self.frames:
            return self.frames[0]
        raise ToolError("no_input", "this tool reads an image and the call has none")

    def clip_range(self, frames: tuple[int, int] | None) -> tuple[int, int]:
        """The inclusive frame range ``[start, end]`` of a clip tool (the whole clip when
        ``frames`` is None)."""
        if not self.frames:
            raise ToolError("no_input", "this tool reads a clip and the call has no frames")
        n = len(self.frames)
        start, end = (0, n - 1) if frames is None else frames
        if end >= n:
            raise ToolError("frame_range", f"frame range [{start}, {end}] is past the clip of {n} frames")
        return start, end


@dataclass(frozen=True)
class Tool:
    """A callable tool: ``run(args, context)`` -> artifact dict (plus an optional view for ZOOM)."""

    name: str
    description: str
    args: tuple[Arg, ...]
    input: Literal["image", "clip"]
    run: Callable[[dict[str, Any], ToolContext], "dict[str, Any] | tuple[dict[str, Any], np.ndarray]"]
    decisive: bool = True


#: tool name -> :class:`Tool` (filled by the tool modules, imported in ``ttrl_lightning.tools``)
TOOLS: Registry[Tool] = Registry("tool")

#: alternative names of the same tools (Pixelis writes ZOOM/CROP and OCR/READ)
ALIASES = {"CROP": "ZOOM", "READ": "OCR"}

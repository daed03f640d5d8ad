"""What a tool call returns to the agent: an :class:`Observation`, successful or a typed error.

A tool never raises out of the rollout for a bad call (Pixelis 3.2: typed, replayable tool calls). Either
``ok`` with a JSON ``artifact``, or not ``ok`` with an ``error`` code from :data:`ERROR_CODES` and a message;
``text`` is what the model is shown, the canonical JSON of the artifact or of ``{"error", "message"}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ttrl_lightning.tools.serialise import canonical_json

#: error code -> when a call gets it
ERROR_CODES: dict[str, str] = {
    "unknown_tool": "the tool name is not in TOOLS",
    "bad_call": "the call text is not a tool call (no JSON object, no name, arguments not an object)",
    "bad_arguments": "an argument is missing, unknown or of the wrong type",
    "no_input": "the tool needs an image or frames the call did not get",
    "box_outside_image": "a box coordinate lies outside [0, 1]",
    "empty_crop": "a box selects no pixel (zero width or height)",
    "frame_range": "a frame index or range lies past the clip",
    "not_found": "the query or box matches no object",
    "disabled": "the tool is switched off (single-tool ablation)",
}


class ToolError(Exception):
    """Raised inside a tool for a bad call; :func:`~ttrl_lightning.tools.run_tool` turns it into an
    observation."""

    def __init__(self, code: str, message: str):
        if code not in ERROR_CODES:
            raise ValueError(f"unknown tool error code {code!r}; known: {', '.join(ERROR_CODES)}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Observation:
    """``ok``: the call ran; ``artifact``: its JSON-able output (None on error); ``error``: the code (None on
    success); ``text``: the serialised form shown to the model. ``view`` holds pixels a tool hands back (the
    ZOOM crop, ``[h, w, 3]`` uint8) for a VLM to see as new image tokens; it is not part of ``text``."""

    ok: bool
    artifact: dict[str, Any] | None
    error: str | None
    text: str
    view: np.ndarray | None = field(default=None, compare=False, repr=False)

    @classmethod
    def success(cls, artifact: dict[str, Any], view: np.ndarray | None = None) -> "Observation":
        return cls(True, artifact, None, canonical_json(artifact), view)

    @classmethod
    def failure(cls, code: str, message: str) -> "Observation":
        if code not in ERROR_CODES:
            raise ValueError(f"unknown tool error code {code!r}; known: {', '.join(ERROR_CODES)}")
        return cls(False, None, code, canonical_json({"error": code, "message": message}))

    @property
    def message(self) -> str | None:
        """The error message (None on success)."""
        if self.ok:
            return None
        import json

        return json.loads(self.text)["message"]

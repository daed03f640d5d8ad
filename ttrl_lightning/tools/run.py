"""Running tools: :func:`run_tool` (a name and parsed arguments), :func:`run_call` (the call text a model
wrote) and :func:`replay` (re-execute recorded calls and compare the observations byte for byte).

Every bad call (unknown tool, call text that is not a call, wrong argument types, a box outside the image,
an empty crop, a frame range past the clip, a disabled tool) comes back as a typed error
:class:`~ttrl_lightning.tools.observation.Observation`; nothing the model writes makes these raise. What
does raise is the caller's own mistake (an image that is not ``HxWx3`` uint8) and a missing backend
(``ImportError`` naming the ``tools`` extra).
"""

from __future__ import annotations

from typing import Any, Iterable

from ttrl_lightning.tools.arguments import check_arguments
from ttrl_lightning.tools.base import ALIASES, TOOLS, ToolContext
from ttrl_lightning.tools.observation import Observation, ToolError
from ttrl_lightning.tools.protocol import parse_tool_call


def canonical_name(name: str) -> str | None:
    """The registered name of ``name`` (upper-cased, aliases resolved), or None when unknown."""
    if not isinstance(name, str):
        return None
    key = ALIASES.get(name.strip().upper(), name.strip().upper())
    return key if key in TOOLS else None


def run_tool(
    name: str,
    args: dict[str, Any],
    *,
    image: Any = None,
    frames: Any = None,
    context: ToolContext | None = None,
    disabled: Iterable[str] = (),
) -> Observation:
    """Run tool ``name`` on ``args`` with ``image`` (PIL or ``HxWx3`` uint8) and / or ``frames`` (a list of
    them) -> :class:`Observation`. ``context`` reuses converted pixels across calls; tools in ``disabled``
    answer with the typed ``disabled`` error (the single-tool ablation's neutral placeholder)."""
    key = canonical_name(name)
    if key is None:
        return Observation.failure(
            "unknown_tool", f"unknown tool {str(name)[:40]!r}; known: {', '.join(TOOLS)}"
        )
    if key in {canonical_name(d) for d in disabled}:
        return Observation.failure("disabled", f"tool {key} is not available")
    tool = TOOLS[key]
    ctx = context if context is not None else ToolContext.of(image, frames)
    try:
        checked = check_arguments(tool.args, args)
        result = tool.run(checked, ctx)
    except ToolError as err:
        return Observation.failure(err.code, err.message)
    if isinstance(result, tuple):
        artifact, view = result
        return Observation.success(artifact, view)
    return Observation.success(result)


def run_call(
    text: str,
    *,
    image: Any = None,
    frames: Any = None,
    context: ToolContext | None = None,
    disabled: Iterable[str] = (),
) -> Observation:
    """Parse ``<tool_call>{json}</tool_call>`` and run it; text that is not a call is a
    ``bad_call`` observation."""
    try:
        name, args = parse_tool_call(text)
    except ValueError as err:
        return Observation.failure("bad_call", str(err))
    return run_tool(name, args, image=image, frames=frames, context=context, disabled=disabled)


class ToolSession:
    """The tool state of one trajectory: its pixels and the views its ZOOM calls returned, in order.

    ``session.run(name, args)`` / ``session.call(text)`` run a step and, after a successful ZOOM, append the
    view so a later ``{"view": k}`` argument reads it; ``session.steps`` records every step as
    ``{"name", "args", "text"}`` (JSON-able), which :func:`replay` re-executes.
    """

    def __init__(self, *, image: Any = None, frames: Any = None, disabled: Iterable[str] = ()):
        self.context = ToolContext.of(image, frames)
        self.disabled = tuple(disabled)
        self.steps: list[dict[str, Any]] = []

    def _record(self, name: Any, args: Any, obs: Observation) -> Observation:
        if obs.ok and obs.view is not None:
            self.context = self.context.with_view(obs.view)
        self.steps.append({"name": name, "args": args, "text": obs.text})
        return obs

    def run(self, name: str, args: dict[str, Any]) -> Observation:
        return self._record(name, args, run_tool(name, args, context=self.context, disabled=self.disabled))

    def call(self, text: str) -> Observation:
        try:
            name, args = parse_tool_call(text)
        except ValueError as err:
            return self._record(None, None, Observation.failure("bad_call", str(err)))
        return self.run(name, args)


def replay(
    steps: Iterable[dict[str, Any]], *, image: Any = None, frames: Any = None, disabled: Iterable[str] = ()
) -> list[int]:
    """Re-execute recorded steps ``{"name", "args", "text"}`` (:attr:`ToolSession.steps`) in order, views
    included, and return the indices whose observation text differs from the record (an empty list: the
    replay reproduced every artifact byte for byte). A step with ``name`` None was call text that did not
    parse; it is compared as recorded."""
    session = ToolSession(image=image, frames=frames, disabled=disabled)
    mismatched = []
    for i, rec in enumerate(steps):
        if rec["name"] is None:
            session.steps.append(rec)
            continue
        if session.run(rec["name"], rec["args"]).text != rec["text"]:
            mismatched.append(i)
    return mismatched

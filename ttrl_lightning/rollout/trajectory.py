"""One agent rollout as a record: ``Trajectory`` (its tool steps, answer, latencies, the pixels' source),
saved as JSON lines, loaded with every field checked, and re-executed to check that its artifacts reproduce."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from ttrl_lightning.data.pool_files import parse_jsonl
from ttrl_lightning.errors import UserError
from ttrl_lightning.safe_files import atomic_write
from ttrl_lightning.tools.run import canonical_name, replay

__all__ = ["Trajectory", "save_trajectories", "load_trajectories", "source_pixels", "replay_trajectory"]


_TRAJECTORY_FIELDS = {"prompt", "completion", "answer", "steps", "latencies", "source", "disabled", "truncated"}


def _expect(record: dict, name: str, types, default=None):
    """``record[name]`` (``default`` when absent) if it is an instance of ``types``, else ``ValueError``."""
    value = record.get(name, default)
    if name in record and not isinstance(value, types):
        expected = types.__name__ if isinstance(types, type) else " or ".join(
            "null" if t is type(None) else t.__name__ for t in types)
        raise ValueError(f"field {name!r} must be {expected}, got {type(value).__name__} {str(value)[:40]!r}")
    return value


@dataclass
class Trajectory:
    """One agent rollout: ``prompt``, ``completion`` (the model's text with the observations it was shown),
    ``answer`` (``final_answer``), ``steps`` (``ToolSession.steps``: ``{"name", "args", "text"}``, the
    replayable record with full artifacts), ``latencies`` (seconds per step, None when not run), ``source``
    and ``disabled`` (to redraw the pixels and replay), ``truncated`` (the step budget or the token budget
    ran out before an answer)."""

    prompt: str
    completion: str
    answer: str | None
    steps: list[dict[str, Any]]
    latencies: list[float | None]
    source: dict | None = None
    disabled: tuple[str, ...] = ()
    truncated: bool = False

    @property
    def tools(self) -> list[str | None]:
        """The canonical tool name of every step (None for a call that did not parse or name a tool)."""
        return [canonical_name(s["name"]) if isinstance(s["name"], str) else None for s in self.steps]

    @property
    def errors(self) -> list[str | None]:
        """The error code of every step (None for a successful call)."""
        return [json.loads(s["text"]).get("error") if s["text"].startswith('{"error"') else None
                for s in self.steps]

    @property
    def evidence(self) -> list[tuple[str, dict[str, Any]]]:
        """``(tool, artifact)`` of every successful step (what ``fidelity.visfid`` scores)."""
        return [(tool, json.loads(s["text"])) for tool, s, err in zip(self.tools, self.steps, self.errors)
                if tool is not None and err is None]

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "completion": self.completion, "answer": self.answer,
                "steps": self.steps, "latencies": self.latencies, "source": self.source,
                "disabled": list(self.disabled), "truncated": self.truncated}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> "Trajectory":
        """The trajectory of a ``to_json`` record, every field and step checked for its type (``ValueError``
        naming the field): a string where a list belongs (``"disabled": "OCR"``) would otherwise become its
        letters and replay a disabled tool."""
        if not isinstance(record, dict):
            raise ValueError(f"a trajectory record is a JSON object, got {type(record).__name__}")
        unknown = sorted(set(record) - _TRAJECTORY_FIELDS)
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}")
        for name in ("prompt", "completion", "answer", "steps", "latencies"):
            if name not in record:
                raise ValueError(f"missing field {name!r}")
        _expect(record, "prompt", str)
        _expect(record, "completion", str)
        _expect(record, "answer", (str, type(None)))
        _expect(record, "source", (dict, type(None)))
        _expect(record, "truncated", bool)
        steps, latencies = _expect(record, "steps", list), _expect(record, "latencies", list)
        disabled = _expect(record, "disabled", list, ())
        if not all(isinstance(d, str) for d in disabled):
            raise ValueError(f"field 'disabled' must be a list of tool names, got {disabled!r}")
        for i, step in enumerate(steps):
            if not isinstance(step, dict) or set(step) != {"name", "args", "text"}:
                raise ValueError(f"steps[{i}] must be an object with exactly name, args and text")
            if not isinstance(step["name"], (str, type(None))) or not isinstance(step["args"], dict) \
                    or not isinstance(step["text"], str):
                raise ValueError(f"steps[{i}]: name must be a string or null, args an object, text a string")
        if len(latencies) != len(steps):
            raise ValueError(f"latencies has {len(latencies)} entries for {len(steps)} steps (one per step)")
        for i, value in enumerate(latencies):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"latencies[{i}] must be a number or null, got {value!r}")
            if value is not None and not 0 <= value < math.inf:  # NaN fails both comparisons
                raise ValueError(f"latencies[{i}] must be a finite number of seconds >= 0, got {value!r}")
        return cls(record["prompt"], record["completion"], record["answer"], steps, latencies,
                   record.get("source"), tuple(disabled), record.get("truncated", False))


# --- saving and re-executing trajectories ---------------------------------------------------------------


def save_trajectories(path, trajectories: Iterable[Trajectory]) -> None:
    """Write ``trajectories`` as JSON lines (``Trajectory.to_json``), atomically."""
    with atomic_write(path) as f:
        for t in trajectories:
            f.write(json.dumps(t.to_json(), sort_keys=True, ensure_ascii=False) + "\n")


def load_trajectories(path) -> list[Trajectory]:
    """Read a file written by :func:`save_trajectories` through the package's one strict JSONL reader
    (``data.pool_files.parse_jsonl``); a bad line (not UTF-8, not JSON, a key given twice, not a trajectory)
    raises ``UserError`` (a ``ValueError``) naming the file and line."""
    out = []
    for where, record in parse_jsonl(str(path)):
        try:
            out.append(Trajectory.from_json(record))
        except ValueError as err:
            raise UserError(f"{where}: not a trajectory record ({err})") from None
    return out


def source_pixels(source: dict) -> tuple[Any, Any]:
    """``(image, frames)`` redrawn from a scene-task ``source`` ``{"kind", "seed", "index"}``."""
    from ttrl_lightning.data.scenes import SCENE_TASKS

    try:
        task = SCENE_TASKS[source["kind"]](int(source["seed"]), int(source["index"]))
    except (KeyError, TypeError) as err:
        raise ValueError(f"trajectory source {source!r} is not a scene task ({err})") from None
    return task.image, (list(task.frames) if task.frames is not None else None)


def replay_trajectory(trajectory: Trajectory, *, image: Any = None, frames: Any = None) -> list[int]:
    """Re-execute ``trajectory``'s tool steps (views included, the same tools disabled) on ``image`` /
    ``frames``, or on the pixels redrawn from its ``source`` when neither is given; returns the indices of
    the steps whose observation bytes differ (empty: every artifact reproduced)."""
    if image is None and frames is None:
        if trajectory.source is None:
            raise ValueError("trajectory has no source: pass its image / frames to replay it")
        image, frames = source_pixels(trajectory.source)
    return replay(trajectory.steps, image=image, frames=frames, disabled=trajectory.disabled)

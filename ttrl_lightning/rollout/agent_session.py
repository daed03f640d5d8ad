"""The agent's tool session: each call run as written on the prompt's pixels, results memoised per
``(source, history, call)`` (``ToolCache``: the N samples of a prompt run each distinct call once) and the
wall time of every call that ran recorded."""
from __future__ import annotations

import json
import time
from typing import Any, Iterable

from ttrl_lightning.tools.observation import Observation
from ttrl_lightning.tools.run import ToolSession

__all__ = ["ToolCache", "AgentToolSession", "cache_key"]


def cache_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


class ToolCache:
    """Memo of tool results: ``(source, earlier steps, name, args) -> Observation``. Only prompts with a
    ``source`` share results across prompts; others share within one ``generate`` call (per prompt)."""

    def __init__(self, max_entries: int = 100_000):
        self.max_entries = max_entries
        self._memo: dict[str, Observation] = {}
        self.hits = self.misses = 0

    def get(self, key: str) -> Observation | None:
        obs = self._memo.get(key)
        if obs is None:
            self.misses += 1
        else:
            self.hits += 1
        return obs

    def put(self, key: str, obs: Observation) -> None:
        if len(self._memo) >= self.max_entries:
            self._memo.clear()
        self._memo[key] = obs


class AgentToolSession(ToolSession):
    """A :class:`ToolSession` that memoises results in a :class:`ToolCache` under ``scope`` and records the
    wall time of every call that ran (``latencies[i]`` seconds; None for a memoised or unparsed step)."""

    def __init__(self, *, image=None, frames=None, disabled: Iterable[str] = (),
                 cache: ToolCache | None = None,
                 scope: str = ""):
        super().__init__(image=image, frames=frames, disabled=disabled)
        self.cache = cache
        self.scope = scope
        self.latencies: list[float | None] = []

    def run(self, name: str, args: dict[str, Any]) -> Observation:
        history = [(s["name"], s["args"]) for s in self.steps]
        key = cache_key([self.scope, sorted(self.disabled), history, name, args])
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None:
            self.latencies.append(None)
            return self._record(name, args, cached)
        start = time.perf_counter()
        obs = super().run(name, args)
        self.latencies.append(time.perf_counter() - start)
        if self.cache is not None:
            self.cache.put(key, obs)
        return obs

    def call(self, text: str) -> Observation:
        before = len(self.latencies)
        obs = super().call(text)
        if len(self.latencies) == before:
            self.latencies.append(None)  # the text did not parse: no tool ran
        return obs

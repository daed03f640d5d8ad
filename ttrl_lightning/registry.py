"""A tiny name -> object registry used for every pluggable family (consensus rules, scores, tools, ...)."""
from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps a method name to an object; ``@REG.register("name")`` adds one, ``REG["name"]`` fetches it.

    Unknown names raise ``KeyError`` listing the known ones, so a typo in a config is never silent.
    """

    def __init__(self, family: str):
        self.family = family
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T | None = None):
        if obj is not None:
            self._add(name, obj)
            return obj

        def deco(fn: T) -> T:
            self._add(name, fn)
            return fn

        return deco

    def _add(self, name: str, obj: T) -> None:
        if name in self._items:
            raise KeyError(f"{self.family} {name!r} is already registered")
        self._items[name] = obj

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            raise KeyError(f"unknown {self.family} {name!r}; known: {known}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(self._items)

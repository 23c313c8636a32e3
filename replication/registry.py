"""One small registry helper, used by every "pick an implementation by name" table in the package.

    ENGINES = Registry("rollout engine")

    @ENGINES.register("hf")
    class HFRolloutEngine: ...

    ENGINES.get("hf")          # the registered object
    ENGINES.names()            # sorted names, for CLI ``choices=`` and config validation
    ENGINES.get("hff")         # KeyError: unknown rollout engine 'hff'; known: ['hf', 'vllm']

Pure Python (no numpy, no torch), so ``replication.allocation`` stays importable on a core install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """A name that is not registered; the message lists the known ones.

    Subclasses both KeyError (mapping lookups) and ValueError (what factories raised before)."""

    def __str__(self) -> str:  # KeyError quotes its argument; show the plain message
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Name → object table with a decorator to fill it and clear errors on lookup."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        """What the entries are, for messages ('allocator', 'rollout engine', ...)."""
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """``@reg.register("name")`` as a decorator, or ``reg.register("name", obj)`` directly.

        Registering a name twice is a programming error and raises ValueError."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def add(o: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} name {name!r} registered twice")
            self._items[name] = o
            return o

        return add if obj is None else add(obj)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {self.names()}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[str, T]]:
        return [(n, self._items[n]) for n in self.names()]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"

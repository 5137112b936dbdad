"""Count a live object's calls without changing its type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Recorder:
    """Counts an instance's calls by name, without changing its type."""

    def __init__(self, target: Any, names: Sequence[str]) -> None:
        self.calls: list[tuple[str, Any]] = []
        for name in names:
            original = getattr(target, name)
            setattr(target, name, self._wrap(name, original))

    def _wrap(self, name: str, original: Any) -> Any:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args[0] if args else kwargs))
            return original(*args, **kwargs)

        return recorded

    def count(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)

"""One bounded, thread-safe LRU map: everything this library remembers in memory.

Whatever the library keeps between calls (the stamps this process wrote, the
ids it reclaimed, the runs it has seen, the targets of unpinned reads, delta
history) is bounded by how many entries it holds and, where a value's size
depends on what users store, by bytes. The least recently used entries go
first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLru(Generic[K, V]):
    """A map of at most `max_entries` entries and, with `size_of`, at most `max_bytes`.

    Args:
        max_entries: How many entries it keeps.
        size_of: How many bytes a value holds; without it, only entries count.
        max_bytes: With `size_of`, the bytes all values may hold together.
        max_entry_bytes: With `size_of`, a value larger than this is not kept.

    Raises:
        ValueError: If a bound is not a positive int.
    """

    def __init__(
        self,
        max_entries: int,
        *,
        size_of: Callable[[V], int] | None = None,
        max_bytes: int | None = None,
        max_entry_bytes: int | None = None,
    ) -> None:
        for name, bound in (
            ("max_entries", max_entries),
            ("max_bytes", max_bytes),
            ("max_entry_bytes", max_entry_bytes),
        ):
            if bound is not None and (type(bound) is not int or bound < 1):
                raise ValueError(f"{name} must be a positive int, got {bound!r}")
        self.max_entries = max_entries
        self._size_of = size_of
        self._max_bytes = max_bytes
        self._max_entry_bytes = max_entry_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """What the values hold now, as `size_of` counts them (0 without it)."""
        return self._bytes

    def get(self, key: K) -> V | None:
        """The value of `key`, now the most recently used; None if absent."""
        if not self._entries:
            return None  # most lookups find an empty map: no lock for them
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V) -> V | None:
        """Keep `value` for `key`, evicting the least recently used over the bounds.

        A value larger than `max_entry_bytes` is not kept, and `key` is
        forgotten. Answers the value `key` had before, if any.
        """
        size = self._size_of(value) if self._size_of is not None else 0
        with self._lock:
            before = self._pop(key)
            if self._max_entry_bytes is not None and size > self._max_entry_bytes:
                return before
            self._entries[key] = (value, size)
            self._bytes += size
            while len(self._entries) > self.max_entries or (
                self._max_bytes is not None and self._bytes > self._max_bytes
            ):
                self._pop(next(iter(self._entries)))
            return before

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, if it had one."""
        if not self._entries:
            return None
        with self._lock:
            return self._pop(key)

    def drop_where(self, doomed: Callable[[K], bool]) -> None:
        """Forget every key `doomed` answers True for."""
        self.drop_entries(lambda key, _: doomed(key))

    def drop_entries(self, doomed: Callable[[K, V], bool]) -> None:
        """Forget every entry `doomed(key, value)` answers True for."""
        with self._lock:
            for key in [k for k, (v, _) in self._entries.items() if doomed(k, v)]:
                self._pop(key)

    def _pop(self, key: K) -> V | None:
        found = self._entries.pop(key, None)
        if found is None:
            return None
        self._bytes -= found[1]
        return found[0]

"""Per-thread locks that live only while somebody holds or waits for them."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager


class _Box:
    """Holds a lock; weakly referenced, so an idle thread's lock is collected."""

    __slots__ = ("__weakref__", "lock")

    def __init__(self, lock: threading.Lock | asyncio.Lock) -> None:
        self.lock = lock


class ThreadLocks:
    """A `threading.Lock` per thread id for sync callers, an `asyncio.Lock` per
    (event loop, thread id) for async ones.

    Entries are weak: the registry holds only the locks in use, however many
    threads pass through. An `asyncio.Lock` belongs to one event loop, so each
    loop gets its own; a loop that is gone takes its locks with it.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._sync: weakref.WeakValueDictionary[str, _Box] = weakref.WeakValueDictionary()
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, weakref.WeakValueDictionary[str, _Box]
        ] = weakref.WeakKeyDictionary()

    def __len__(self) -> int:
        with self._guard:
            return len(self._sync) + sum(len(m) for m in self._async.values())

    def _box(self, thread_id: str, loop: asyncio.AbstractEventLoop | None) -> _Box:
        with self._guard:
            if loop is None:
                registry = self._sync
            elif (known := self._async.get(loop)) is not None:
                registry = known
            else:
                registry = self._async[loop] = weakref.WeakValueDictionary()
            box = registry.get(thread_id)
            if box is None:
                box = _Box(threading.Lock() if loop is None else asyncio.Lock())
                registry[thread_id] = box
            return box

    @contextmanager
    def hold(self, thread_id: str) -> Iterator[None]:
        """Hold `thread_id`'s sync lock."""
        box = self._box(thread_id, None)
        with box.lock:  # type: ignore[union-attr]
            yield

    def ahold(self, thread_id: str) -> _AsyncHold:
        """Hold `thread_id`'s lock for the running event loop (`async with`)."""
        return _AsyncHold(self._box(thread_id, asyncio.get_running_loop()))


class _AsyncHold:
    """`async with` on a box's `asyncio.Lock`, keeping the box alive while held.

    A plain class, not `asynccontextmanager`: every admission that may
    reclaim passes through it.
    """

    __slots__ = ("_box",)

    def __init__(self, box: _Box) -> None:
        self._box = box

    async def __aenter__(self) -> None:
        await self._box.lock.acquire()  # type: ignore[misc]

    async def __aexit__(self, *exc_info: object) -> None:
        self._box.lock.release()
